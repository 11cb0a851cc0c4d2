/* prep.h: what the pieces of dtrain-prep share (a program of its own, not
 * part of libdtcore):
 *   prep_common.c die(), allocation, the clock, the register of outputs
 *                 (what every other piece uses; it uses none of them)
 *   prep.c        main, the command line, output names, the summary
 *   prep_input.c  the data: IDX files read, or synthetic rows generated
 *   prep_text.c   --text: text files read, checked and tokenized
 *   prep_write.c  the HDF5 files, written under temporary names
 *   tokenizer.c   byte-level BPE and the UTF-8 check (no MPI, no HDF5)
 *
 * The one rule they keep: every error ends in die(), which removes every
 * partial output (prep_common.c registers them) before exiting with the
 * code that says whose fault it was. The calls go one way: prep.c uses the
 * others, they use prep_common.c (tests/layering.sh checks for circles). */
#ifndef DT_PREP_H
#define DT_PREP_H

#include <stddef.h>
#include <stdint.h>

#include "prep/idx.h"
#include "prep/tokenizer.h"

enum { EXIT_WRITE = 1, EXIT_USAGE = 2, EXIT_DATA = 3 };

#define PROG "dtrain-prep"
#define MAX_CLASSES 256 /* labels are uint8 */

struct options {
    const char *output;
    const char *source;       /* --source, or NULL when explicit paths are used */
    const char *train_images, *train_labels, *test_images, *test_labels;
    long limit_train, limit_test; /* 0: all samples */
    long classes;                 /* 0: max label + 1 */
    const char *class_names;      /* comma-separated, or NULL */
    long shards;                  /* 0: one file named OUTPUT */
    const char *synthetic;        /* --synthetic spec, or NULL */
    long seed;
    int seed_set;
    const char **text;            /* [n_text] --text files, in order; n_text 0: not text */
    int n_text;
    const char *tokenizer;        /* --tokenizer as given, or NULL */
    uint32_t bpe_merges;          /* N of bpe:N; 0 for byte */
    double val_fraction;          /* --val-fraction, default 0.1 with --text */
    int val_fraction_set;
    int force, quiet;
};

struct split {
    const char *name;               /* "train" or "test" */
    const char *images_path, *labels_path;
    struct idx_array images, labels; /* whole files as read (IDX input) */
    size_t n;                        /* samples written (after --limit-*) */
    size_t total;                    /* samples in the files */
    uint32_t height, width, channels;
    int synthetic;                   /* rows are generated, not read */
    uint64_t synth_seed;             /* the generator's stream */
    uint64_t synth_first;            /* stream index of this split's row 0 */
    int num_classes;                 /* label range of generated rows */
};

struct dataset {
    struct split train, test;
    int has_test;
    int num_classes;
    const char **class_names; /* num_classes entries, or NULL */
    char *class_names_text;   /* --class-names' copy the entries point into (NULL: built in) */
    char *source;
    long seed;                /* --seed, for the summary of synthetic data */
};

/* A token dataset (--text): one stream, the training part then the test. */
struct token_data {
    uint32_t *tokens;        /* [n]: every file's tokens, in order */
    size_t n, n_train;       /* /train/tokens: [0, n_train), /test/tokens: the rest */
    struct dt_bpe bpe;       /* the merges (none for byte): V = 256 + bpe.n_merges */
    const char *tokenizer;   /* "byte" or "bpe" */
    char *source;            /* the source attribute */
    size_t bytes;            /* of text read */
    double read_s, train_s, encode_s;
};

/* ---- prep_common.c --------------------------------------------------------- */

/* "dtrain-prep: MESSAGE" on stderr, partial outputs removed, exit(code). */
__attribute__((format(printf, 2, 3), noreturn))
void die(int code, const char *fmt, ...);
void *xmalloc(size_t n);
double now_s(void); /* monotonic seconds */
/* The COUNT outputs NAMES get temporary names NAME.tmp.<pid>. */
void outputs_begin(const char *const *names, int count);
/* Temporary I created, empty (from now on removed on failure); its path. */
const char *output_create(const char *name, int i);
/* Every temporary renamed into place: nothing to undo any more. */
void outputs_commit(const char *const *names, int count);
/* Unlinks the temporaries and the outputs already renamed (die's cleanup). */
void remove_partial_outputs(void);
/* SIGINT/SIGTERM/SIGHUP: the temporaries removed, then the default action. */
void on_signal(int sig);

/* ---- prep_input.c ------------------------------------------------------------ */

/* --source DIR into the four file paths (nothing without --source). */
void resolve_inputs(struct options *o);
void load_dataset(struct dataset *d, const struct options *o);
void load_synthetic(struct dataset *d, const struct options *o);
/* What load_dataset or load_synthetic allocated, and resolve_inputs'
 * paths (o's, when --source found them). */
void free_dataset(struct dataset *d, struct options *o);

/* Synthetic rows: row's stream, bytes [b0, b1) of its image, its label. */
uint64_t synth_row_base(const struct split *s, uint64_t row);
void synth_bytes(uint8_t *out, uint64_t base, size_t b0, size_t b1);
uint8_t synth_label(const struct split *s, uint64_t row);

/* ---- prep_text.c ------------------------------------------------------------- */

/* --tokenizer's value into O (usage error when malformed). */
void parse_tokenizer(struct options *o, const char *arg);
/* --text files read (each nonempty UTF-8), tokenized, split by --val-fraction. */
void load_text(struct token_data *t, const struct options *o);
void free_text(struct token_data *t);

/* ---- prep_write.c -------------------------------------------------------------- */

/* All COUNT outputs under temporary names, then each renamed into place. */
void write_outputs(const char **names, int count, int sharded, const struct dataset *d);
/* The token dataset T as NAME (through a temporary, as write_outputs). */
void write_token_output(const char *name, const struct token_data *t);
/* Shard I of K's slice [*first, *first + *n) of TOTAL samples. */
void shard_slice(size_t total, int k, int i, size_t *first, size_t *n);

#endif
