/* model_file.c: parsing model description files (see model_file.h). */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/model_file.h"

static const struct section {
    const char *name;
    const char *keys; /* allowed keys, space-separated */
    const char *required;
} sections[] = {
    {"conv2d", "filters kernel stride padding activation", "filters kernel"},
    {"maxpool", "size stride", ""},
    {"dense", "units activation", "units"},
    {"relu", "", ""},
    {"dropout", "rate", "rate"},
    {"avgpool", "size stride", ""},
    {"global_avgpool", "", ""},
    {"batchnorm", "momentum epsilon activation", ""},
    {"add", "from activation", "from"},
    {"route", "from", "from"},
    {"flatten", "", ""},
    {"reshape", "shape", "shape"},
};
enum { NSECTIONS = sizeof sections / sizeof *sections };

static char *trim(char *s)
{
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = '\0';
    return s;
}

static int positive(const char *path, int line, const char *key, const char *v, int *out, dt_status *st)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < 1 || x > INT_MAX)
        return dt_fail(st, DT_EUSAGE, "%s:%d: %s: expected a positive integer, found '%s'", path, line, key, v);
    *out = (int)x;
    return DT_OK;
}

static int key_index(const struct section *sec, const char *key)
{
    int i = 0;
    for (const char *p = sec->keys; *p; i++) {
        while (*p == ' ') p++;
        const char *e = p;
        while (*e && *e != ' ') e++;
        if ((size_t)(e - p) == strlen(key) && !strncmp(p, key, strlen(key))) return i;
        p = e;
    }
    return -1;
}

/* The layer of the current section is complete: its required keys were set. */
static int finish_layer(const char *path, int line, const struct section *sec, unsigned set, dt_status *st)
{
    char req[64];
    snprintf(req, sizeof req, "%s", sec->required);
    for (char *k = strtok(req, " "); k; k = strtok(NULL, " "))
        if (!(set & (1u << key_index(sec, k))))
            return dt_fail(st, DT_EUSAGE, "%s:%d: [%s] needs %s (required: %s)", path, line, sec->name, k, sec->required);
    return DT_OK;
}

int dt_model_file_parse(const char *path, int classes, struct dt_layer_spec *specs, int *n, dt_status *st)
{
    FILE *f = fopen(path, "r");
    if (!f) return dt_fail(st, DT_EUSAGE, "--model %s: cannot open it: %s", path, strerror(errno));
    char buf[512];
    int line = 0, nl = 0, rc = DT_OK, sec_line = 0;
    const struct section *sec = NULL;
    unsigned set = 0;
    *n = 0;
    while (rc == DT_OK && fgets(buf, sizeof buf, f)) {
        line++;
        /* A binary file is named, not echoed back to the terminal. */
        for (const unsigned char *p = (const unsigned char *)buf; *p && rc == DT_OK; p++)
            if ((*p < 0x20 && *p != '\t' && *p != '\n' && *p != '\r') || *p == 0x7f)
                rc = dt_fail(st, DT_EUSAGE, "%s:%d: not a text model file (byte 0x%02x at column %d; expected "
                             "[section] and key = value lines)", path, line, *p, (int)(p - (const unsigned char *)buf) + 1);
        if (rc != DT_OK) break;
        char *hash = strchr(buf, '#');
        if (hash) *hash = '\0';
        char *s = trim(buf);
        if (!*s) continue;
        if (*s == '[') {
            char *close = strchr(s, ']');
            if (!close || *trim(close + 1))
                rc = dt_fail(st, DT_EUSAGE, "%s:%d: expected [section], found '%s'", path, line, s);
            else {
                *close = '\0';
                char *name = trim(s + 1);
                if (sec) rc = finish_layer(path, sec_line, sec, set, st);
                sec = NULL;
                for (int i = 0; i < NSECTIONS; i++)
                    if (!strcmp(name, sections[i].name)) sec = &sections[i];
                if (rc == DT_OK && !sec)
                    rc = dt_fail(st, DT_EUSAGE, "%s:%d: unknown section [%s] (expected conv2d, maxpool, avgpool, "
                                 "global_avgpool, dense, relu, dropout, batchnorm, add, route, flatten or reshape)",
                                 path, line, name);
                else if (rc == DT_OK && nl == DT_MAX_LAYERS)
                    rc = dt_fail(st, DT_EUSAGE, "%s:%d: more than %d layers", path, line, DT_MAX_LAYERS);
                else if (rc == DT_OK) {
                    specs[nl] = (struct dt_layer_spec){.type = sec->name};
                    if (!strcmp(sec->name, "maxpool") || !strcmp(sec->name, "avgpool")) specs[nl].kernel = 2;
                    nl++;
                    set = 0;
                    sec_line = line;
                }
            }
            continue;
        }
        char *eq = strchr(s, '=');
        if (!sec) {
            rc = dt_fail(st, DT_EUSAGE, "%s:%d: '%s' before any [section]", path, line, s);
            break;
        }
        if (!eq) {
            rc = dt_fail(st, DT_EUSAGE, "%s:%d: expected key = value, found '%s'", path, line, s);
            break;
        }
        *eq = '\0';
        char *key = trim(s), *val = trim(eq + 1);
        int ki = key_index(sec, key);
        struct dt_layer_spec *sp = &specs[nl - 1];
        if (ki < 0) {
            rc = dt_fail(st, DT_EUSAGE, "%s:%d: [%s] has no key '%s' (expected: %s)", path, line, sec->name, key,
                         *sec->keys ? sec->keys : "no keys");
            break;
        }
        if (set & (1u << ki)) {
            rc = dt_fail(st, DT_EUSAGE, "%s:%d: %s given twice in this [%s]", path, line, key, sec->name);
            break;
        }
        set |= 1u << ki;
        if (!strcmp(key, "filters")) rc = positive(path, line, key, val, &sp->filters, st);
        else if (!strcmp(key, "kernel") || !strcmp(key, "size")) rc = positive(path, line, key, val, &sp->kernel, st);
        else if (!strcmp(key, "stride")) rc = positive(path, line, key, val, &sp->stride, st);
        else if (!strcmp(key, "units")) {
            if (!strcmp(val, "classes")) sp->filters = classes;
            else rc = positive(path, line, key, val, &sp->filters, st);
        }
        else if (!strcmp(key, "padding")) {
            if (!strcmp(val, "same")) sp->same = 1;
            else if (strcmp(val, "valid"))
                rc = dt_fail(st, DT_EUSAGE, "%s:%d: padding: expected valid or same, found '%s'", path, line, val);
        }
        else if (!strcmp(key, "activation")) {
            if (!strcmp(val, "relu")) sp->activation = DT_ACT_RELU;
            else if (strcmp(val, "none") && strcmp(val, "linear"))
                rc = dt_fail(st, DT_EUSAGE, "%s:%d: activation: expected relu or none, found '%s'", path, line, val);
        }
        else if (!strcmp(key, "from")) {
            char *end;
            errno = 0;
            long x = strtol(val, &end, 10);
            if (errno || end == val || *end || x > -1 || x < -DT_MAX_LAYERS)
                rc = dt_fail(st, DT_EUSAGE, "%s:%d: from: expected a negative layer offset (-1 = the previous layer), "
                             "found '%s'", path, line, val);
            else if (x < -nl)
                rc = dt_fail(st, DT_EUSAGE, "%s:%d: from = %ld: this is layer %d, so -%d (the model's input) is the "
                             "farthest back", path, line, x, nl, nl);
            sp->from = (int)x;
        }
        else if (!strcmp(key, "shape")) {
            int h, w, c, used = 0;
            if (sscanf(val, "%dx%dx%d%n", &h, &w, &c, &used) != 3 || val[used] || h < 1 || w < 1 || c < 1)
                rc = dt_fail(st, DT_EUSAGE, "%s:%d: shape: expected HxWxC (e.g. 7x7x64), found '%s'", path, line, val);
            else sp->shape = (struct dt_shape){h, w, c};
        }
        else if (!strcmp(key, "momentum") || !strcmp(key, "epsilon")) {
            char *end;
            errno = 0;
            double x = strtod(val, &end);
            int mom = key[0] == 'm';
            if (errno || end == val || *end || (mom ? !(x >= 0.0 && x < 1.0) : !(x > 0.0 && x < 1.0)))
                rc = dt_fail(st, DT_EUSAGE, "%s:%d: %s: expected a number in %s, found '%s'", path, line, key,
                             mom ? "[0, 1)" : "(0, 1)", val);
            else if (mom) sp->momentum = x == 0.0 ? 1e-30f : (float)x; /* 0 in the spec means the default */
            else sp->epsilon = (float)x;
        }
        else if (!strcmp(key, "rate")) {
            char *end;
            errno = 0;
            double r = strtod(val, &end);
            if (errno || end == val || *end || !(r >= 0.0 && r < 1.0))
                rc = dt_fail(st, DT_EUSAGE, "%s:%d: rate: expected a number in [0, 1), found '%s'", path, line, val);
            sp->rate = (float)r;
        }
    }
    fclose(f);
    if (rc == DT_OK && sec) rc = finish_layer(path, sec_line, sec, set, st);
    if (rc == DT_OK && nl == 0) rc = dt_fail(st, DT_EUSAGE, "%s: no layers (expected [conv2d], [dense], ... sections)", path);
    *n = nl;
    return rc;
}
