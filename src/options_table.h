/* options_table.h: one row per command-line option (the rows are in
 * options_table.c; options.c turns them into getopt's arrays, --help, the
 * defaults and the checks).
 *
 * A row says where its value goes (offsetof into struct dt_config) and what
 * kind of value it is; the kind decides the C type of that field, how the
 * argument is read and how a value already in the config is checked. Only
 * the few options whose argument is its own little language have a parse
 * function of their own (DT_OPT_CUSTOM). */
#ifndef DT_OPTIONS_TABLE_H
#define DT_OPTIONS_TABLE_H

#include <stddef.h>

#include "options.h"

enum dt_opt_kind {
    DT_OPT_FLAG,   /* no argument; int field = .set */
    DT_OPT_INT,    /* int field: an integer in [imin, imax] */
    DT_OPT_LONG,   /* long field: the same */
    DT_OPT_U64,    /* uint64_t field: the same (a value set by libdtrain is not checked) */
    DT_OPT_FLOAT,  /* float field: a number in [min, max] */
    DT_OPT_DOUBLE, /* double field: the same, read as a float as it always was */
    DT_OPT_STRING, /* const char * field: the argument, refused by .verify if given */
    DT_OPT_NAME,   /* const char * field: one of .names (stored as the table's own string),
                      or else what .is_other accepts (stored as given) */
    DT_OPT_CHOICE, /* int field: .values[i] for .names[i] */
    DT_OPT_CUSTOM, /* .parse reads the argument and fills the config */
};

enum {
    DT_OPT_LO_OPEN = 1, /* FLOAT, DOUBLE: min itself is refused ("a positive number") */
    DT_OPT_HI_OPEN = 2, /* max itself is refused: [min, max) */
    DT_OPT_SNUG = 4,    /* --help: the text starts at column 27 even after a single
                           space (the layout --help always had for this one) */
};

struct dt_option {
    const char *name;       /* the long name, without "--" */
    char letter;            /* the short option, or 0 */
    unsigned char kind;     /* enum dt_opt_kind */
    unsigned char flags;    /* DT_OPT_LO_OPEN | ... */
    size_t off;             /* offsetof(struct dt_config, the field); CUSTOM: unused */
    long imin, imax;        /* INT, LONG, U64 */
    double min, max;        /* FLOAT, DOUBLE */
    double def;             /* the default of a number, FLAG or CHOICE field */
    int set;                /* FLAG: the value it stores */
    const char *def_str;    /* the default of a STRING or NAME field; CUSTOM: the default
                               as an argument, which .parse reads */
    const char *const *names; /* NAME, CHOICE (and CUSTOM, for messages and the man page); NULL-ended */
    const int *values;      /* CHOICE: the value of each name */
    const char *other;      /* NAME, CUSTOM: what else is accepted, for the message */
    int (*is_other)(const char *arg);                                   /* NAME */
    int (*verify)(const char *flag, const char *arg, dt_status *st);    /* STRING */
    int (*parse)(const struct dt_option *o, struct dt_config *cfg, const char *flag, const char *arg,
                 dt_status *st);                                        /* CUSTOM */
    const char *arg;        /* the argument's name in --help; NULL: none */
    const char *help;       /* --help's text, lines split at '\n'; "%D" prints the default */
    const char *section;    /* --help starts this section with this row */
};

extern const struct dt_option dt_option_table[]; /* ends with a row whose name is NULL */

/* "expected A, B or C" (names, then other), for a row's messages. */
void dt_option_expected(const struct dt_option *o, char *buf, size_t size);
/* "FLAG: expected ..., found 'ARG'" into st; returns DT_EUSAGE. */
int dt_option_refuse(const struct dt_option *o, const char *flag, const char *arg, dt_status *st);

#endif
