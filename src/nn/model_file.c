/* model_file.c: parsing model description files (see model_file.h). */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
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
    {"embedding", "vocab width block_size", "width block_size"},
    {"layernorm", "epsilon", ""},
    {"attention", "heads", "heads"},
    {"linear", "units activation", "units"},
    {"gelu", "", ""},
    {"lm_head", "vocab tied", ""},
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
    char req[64], *save = NULL;
    snprintf(req, sizeof req, "%s", sec->required);
    for (char *k = strtok_r(req, " ", &save); k; k = strtok_r(NULL, " ", &save))
        if (!(set & (1u << key_index(sec, k))))
            return dt_fail(st, DT_EUSAGE, "%s:%d: [%s] needs %s (required: %s)", path, line, sec->name, k, sec->required);
    return DT_OK;
}

/* A number in [lo, hi) (lo excluded too where open), for key. */
static int number(const char *path, int line, const char *key, const char *v, double lo, double hi, int open,
                  double *out, dt_status *st)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(open ? x > lo : x >= lo) || !(x < hi))
        return dt_fail(st, DT_EUSAGE, "%s:%d: %s: expected a number in %s%g, %g), found '%s'", path, line, key,
                       open ? "(" : "[", lo, hi, v);
    *out = x;
    return DT_OK;
}

/* from = -k of layer nl (1-based): at most the model's input back. */
static int offset(const char *path, int line, const char *v, int nl, int *out, dt_status *st)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x > -1 || x < -DT_MAX_LAYERS)
        return dt_fail(st, DT_EUSAGE, "%s:%d: from: expected a negative layer offset (-1 = the previous layer), "
                       "found '%s'", path, line, v);
    *out = (int)x;
    if (x < -nl)
        return dt_fail(st, DT_EUSAGE, "%s:%d: from = %ld: this is layer %d, so -%d (the model's input) is the "
                       "farthest back", path, line, x, nl, nl);
    return DT_OK;
}

/* One key = value of layer sp (the nl-th); the key is one its section allows. */
static int set_value(const char *path, int line, const char *key, const char *val, struct dt_layer_spec *sp,
                     int classes, int nl, dt_status *st)
{
    double x = 0.0;
    if (!strcmp(key, "filters")) return positive(path, line, key, val, &sp->filters, st);
    if (!strcmp(key, "kernel") || !strcmp(key, "size")) return positive(path, line, key, val, &sp->kernel, st);
    if (!strcmp(key, "stride")) return positive(path, line, key, val, &sp->stride, st);
    if (!strcmp(key, "width")) return positive(path, line, key, val, &sp->filters, st);
    if (!strcmp(key, "block_size")) return positive(path, line, key, val, &sp->block, st);
    if (!strcmp(key, "heads")) return positive(path, line, key, val, &sp->heads, st);
    if (!strcmp(key, "vocab")) {
        if (strcmp(val, "classes")) return positive(path, line, key, val, &sp->vocab, st);
        sp->vocab = classes;
    }
    else if (!strcmp(key, "tied")) {
        if (strcmp(val, "0") && strcmp(val, "1"))
            return dt_fail(st, DT_EUSAGE, "%s:%d: tied: expected 1 (share the embedding's table) or 0, found '%s'",
                           path, line, val);
        sp->tied = !strcmp(val, "1");
    }
    if (!strcmp(key, "from")) return offset(path, line, val, nl, &sp->from, st);
    if (!strcmp(key, "units")) {
        if (strcmp(val, "classes")) return positive(path, line, key, val, &sp->filters, st);
        sp->filters = classes;
    }
    else if (!strcmp(key, "padding")) {
        if (strcmp(val, "same") && strcmp(val, "valid"))
            return dt_fail(st, DT_EUSAGE, "%s:%d: padding: expected valid or same, found '%s'", path, line, val);
        sp->same = !strcmp(val, "same");
    }
    else if (!strcmp(key, "activation")) {
        const int gelu_ok = !strcmp(sp->type, "linear");
        if (strcmp(val, "relu") && strcmp(val, "none") && strcmp(val, "linear") && (!gelu_ok || strcmp(val, "gelu")))
            return dt_fail(st, DT_EUSAGE, "%s:%d: activation: expected relu%s or none, found '%s'", path, line,
                           gelu_ok ? ", gelu" : "", val);
        if (!strcmp(val, "relu")) sp->activation = DT_ACT_RELU;
        if (!strcmp(val, "gelu")) sp->activation = DT_ACT_GELU;
    }
    else if (!strcmp(key, "shape")) {
        int h, w, c, used = 0;
        if (sscanf(val, "%dx%dx%d%n", &h, &w, &c, &used) != 3 || val[used] || h < 1 || w < 1 || c < 1)
            return dt_fail(st, DT_EUSAGE, "%s:%d: shape: expected HxWxC (e.g. 7x7x64), found '%s'", path, line, val);
        sp->shape = (struct dt_shape){h, w, c};
    }
    else if (!strcmp(key, "momentum")) {
        if (number(path, line, key, val, 0.0, 1.0, 0, &x, st) != DT_OK) return st->code;
        sp->momentum = x == 0.0 ? 1e-30f : (float)x; /* 0 in the spec means the default */
    }
    else if (!strcmp(key, "epsilon")) {
        if (number(path, line, key, val, 0.0, 1.0, 1, &x, st) != DT_OK) return st->code;
        sp->epsilon = (float)x;
    }
    else if (!strcmp(key, "rate")) {
        if (number(path, line, key, val, 0.0, 1.0, 0, &x, st) != DT_OK) return st->code;
        sp->rate = (float)x;
    }
    return DT_OK;
}

/* A "[name]" line (s, trimmed): the section before it is complete, and a
 * new layer starts as specs[*nl]. */
static int open_section(const char *path, int line, char *s, const struct section **sec, unsigned *set,
                        int *sec_line, struct dt_layer_spec *specs, int *nl, int *stage, dt_status *st)
{
    char *close = strchr(s, ']');
    if (!close || *trim(close + 1)) return dt_fail(st, DT_EUSAGE, "%s:%d: expected [section], found '%s'", path, line, s);
    *close = '\0';
    char *name = trim(s + 1);
    if (*sec && finish_layer(path, *sec_line, *sec, *set, st) != DT_OK) return st->code;
    *sec = NULL;
    if (!strcmp(name, "stage")) { /* a pipeline stage starts at the next layer */
        if (*nl == 0)
            return dt_fail(st, DT_EUSAGE, "%s:%d: [stage] before the first layer (the first stage starts there "
                           "anyway; [stage] goes between layers)", path, line);
        if (*stage) return dt_fail(st, DT_EUSAGE, "%s:%d: [stage] twice with no layer between", path, line);
        *stage = line;
        return DT_OK;
    }
    for (int i = 0; i < NSECTIONS; i++)
        if (!strcmp(name, sections[i].name)) *sec = &sections[i];
    if (!*sec)
        return dt_fail(st, DT_EUSAGE, "%s:%d: unknown section [%s] (expected conv2d, maxpool, avgpool, global_avgpool, "
                       "dense, relu, dropout, batchnorm, add, route, flatten, reshape, embedding, layernorm, "
                       "attention, linear, gelu or lm_head)", path, line, name);
    if (*nl == DT_MAX_LAYERS) return dt_fail(st, DT_EUSAGE, "%s:%d: more than %d layers", path, line, DT_MAX_LAYERS);
    specs[*nl] = (struct dt_layer_spec){.type = (*sec)->name, .stage = *stage != 0};
    *stage = 0;
    if (!strcmp((*sec)->name, "maxpool") || !strcmp((*sec)->name, "avgpool")) specs[*nl].kernel = 2;
    if (!strcmp((*sec)->name, "lm_head")) specs[*nl].tied = 1; /* GPT-2's */
    (*nl)++;
    *set = 0;
    *sec_line = line;
    return DT_OK;
}

/* A binary file is named, not echoed back to the terminal. */
static int text_line(const char *path, int line, const char *buf, dt_status *st)
{
    for (const unsigned char *p = (const unsigned char *)buf; *p; p++)
        if ((*p < 0x20 && *p != '\t' && *p != '\n' && *p != '\r') || *p == 0x7f)
            return dt_fail(st, DT_EUSAGE, "%s:%d: not a text model file (byte 0x%02x at column %d; expected "
                           "[section] and key = value lines)", path, line, *p, (int)(p - (const unsigned char *)buf) + 1);
    return DT_OK;
}

/* A "key = value" line (s, trimmed) of section sec, for layer specs[nl - 1]. */
static int key_line(const char *path, int line, char *s, const struct section *sec, unsigned *set,
                    struct dt_layer_spec *specs, int nl, int classes, dt_status *st)
{
    char *eq = strchr(s, '=');
    if (!sec && nl > 0) return dt_fail(st, DT_EUSAGE, "%s:%d: '%s' after [stage], which takes no keys", path, line, s);
    if (!sec) return dt_fail(st, DT_EUSAGE, "%s:%d: '%s' before any [section]", path, line, s);
    if (!eq) return dt_fail(st, DT_EUSAGE, "%s:%d: expected key = value, found '%s'", path, line, s);
    *eq = '\0';
    char *key = trim(s), *val = trim(eq + 1);
    int ki = key_index(sec, key);
    if (ki < 0)
        return dt_fail(st, DT_EUSAGE, "%s:%d: [%s] has no key '%s' (expected: %s)", path, line, sec->name, key,
                       *sec->keys ? sec->keys : "no keys");
    if (*set & (1u << ki))
        return dt_fail(st, DT_EUSAGE, "%s:%d: %s given twice in this [%s]", path, line, key, sec->name);
    *set |= 1u << ki;
    return set_value(path, line, key, val, &specs[nl - 1], classes, nl, st);
}

/* The lines of f; path names it in messages. */
static int parse_stream(FILE *f, const char *path, int classes, struct dt_layer_spec *specs, int *n, dt_status *st)
{
    char buf[512];
    int line = 0, nl = 0, rc = DT_OK, sec_line = 0, stage = 0;
    const struct section *sec = NULL;
    unsigned set = 0;
    while (rc == DT_OK && fgets(buf, sizeof buf, f)) {
        line++;
        if ((rc = text_line(path, line, buf, st)) != DT_OK) break;
        char *hash = strchr(buf, '#');
        if (hash) *hash = '\0';
        char *s = trim(buf);
        if (*s == '[') rc = open_section(path, line, s, &sec, &set, &sec_line, specs, &nl, &stage, st);
        else if (*s) rc = key_line(path, line, s, sec, &set, specs, nl, classes, st);
    }
    if (rc == DT_OK && sec) rc = finish_layer(path, sec_line, sec, set, st);
    if (rc == DT_OK && stage)
        rc = dt_fail(st, DT_EUSAGE, "%s:%d: [stage] after the last layer (a stage needs a layer of its own)", path, stage);
    for (int i = 0; i < nl; i++) /* the vocabulary is the data's unless stated */
        if (!specs[i].vocab && (!strcmp(specs[i].type, "embedding") || !strcmp(specs[i].type, "lm_head")))
            specs[i].vocab = classes;
    if (rc == DT_OK && nl == 0) rc = dt_fail(st, DT_EUSAGE, "%s: no layers (expected [conv2d], [dense], ... sections)", path);
    *n = nl;
    return rc;
}

int dt_model_file_parse(const char *path, int classes, struct dt_layer_spec *specs, int *n, dt_status *st)
{
    FILE *f = fopen(path, "r");
    if (!f) return dt_fail(st, DT_EUSAGE, "--model %s: cannot open it: %s", path, strerror(errno));
    int rc = parse_stream(f, path, classes, specs, n, st);
    fclose(f);
    return rc;
}

int dt_model_file_parse_text(const char *name, const char *text, size_t len, int classes, struct dt_layer_spec *specs,
                             int *n, dt_status *st)
{
    *n = 0;
    if (len == 0) return dt_fail(st, DT_EUSAGE, "%s: no layers (an empty model file)", name);
    FILE *f = fmemopen((void *)(uintptr_t)text, len, "r");
    if (!f) DT_DIE("fmemopen of a %zu-byte model text: %s", len, strerror(errno));
    int rc = parse_stream(f, name, classes, specs, n, st);
    fclose(f);
    return rc;
}
