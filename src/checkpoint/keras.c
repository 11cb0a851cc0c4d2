/* keras.c: Keras 3 .weights.h5 export (see keras.h). */
#include "config.h"

#include <errno.h>
#include <hdf5.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/keras.h"
#include "runtime/h5lock.h"

/* A vars group with its scalar variable-length UTF-8 "name" attribute. */
static hid_t vars_group(hid_t parent, const char *path, const char *name)
{
    hid_t g = H5Gcreate2(parent, path, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0) return g;
    hid_t t = H5Tcopy(H5T_C_S1), sp = H5Screate(H5S_SCALAR);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    hid_t a = H5Acreate2(g, "name", t, sp, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = a < 0 ? -1 : H5Awrite(a, t, &name);
    if (a >= 0) H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
    if (rc < 0) {
        H5Gclose(g);
        return -1;
    }
    return g;
}

static herr_t write_var(hid_t g, const char *name, int rank, const hsize_t *dims, const float *data)
{
    hid_t sp = H5Screate_simple(rank, dims, NULL);
    hid_t d = H5Dcreate2(g, name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = d < 0 ? -1 : H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
    if (d >= 0) H5Dclose(d);
    H5Sclose(sp);
    return rc;
}

static herr_t write_all(hid_t f, const struct dt_model *m, const float *params, const float *buffers)
{
    hid_t layers = H5Gcreate2(f, "layers", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (layers < 0) return -1;
    herr_t rc = 0;
    int nflatten = 0;
    char path[96], fname[32];
    for (int i = 0; i < m->nlayers && rc >= 0; i++) {
        const struct dt_layer *l = &m->layers[i];
        /* Keras puts a Flatten before a Dense that reads an image. */
        if (l->ops == &dt_dense_ops && (l->in.h > 1 || l->in.w > 1)) {
            if (nflatten) snprintf(fname, sizeof fname, "flatten_%d", nflatten);
            else snprintf(fname, sizeof fname, "flatten");
            nflatten++;
            snprintf(path, sizeof path, "%s/vars", fname);
            hid_t lg = H5Gcreate2(layers, fname, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            hid_t g = lg < 0 ? -1 : vars_group(lg, "vars", fname);
            if (g < 0) rc = -1;
            if (g >= 0) H5Gclose(g);
            if (lg >= 0) H5Gclose(lg);
        }
        hid_t lg = H5Gcreate2(layers, l->name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        hid_t g = lg < 0 ? -1 : vars_group(lg, "vars", l->name);
        if (g < 0) rc = -1;
        else if (l->nparams) {
            const float *w = params + l->param_offset;
            hsize_t kd[4], bd[1];
            int kr;
            if (l->ops == &dt_batchnorm_ops) { /* gamma, beta, moving mean, moving variance */
                hsize_t c[1] = {(hsize_t)l->out.c};
                const float *b = buffers + l->buffer_offset;
                if (write_var(g, "0", 1, c, w) < 0 || write_var(g, "1", 1, c, w + c[0]) < 0 ||
                    write_var(g, "2", 1, c, b) < 0 || write_var(g, "3", 1, c, b + c[0]) < 0)
                    rc = -1;
                H5Gclose(g);
                H5Gclose(lg);
                continue;
            }
            if (l->ops == &dt_conv2d_ops) {
                kr = 4;
                kd[0] = kd[1] = (hsize_t)l->spec.kernel;
                kd[2] = (hsize_t)l->in.c;
                kd[3] = (hsize_t)l->out.c;
            }
            else {
                kr = 2;
                kd[0] = (hsize_t)dt_shape_size(l->in);
                kd[1] = (hsize_t)dt_shape_size(l->out);
            }
            size_t kn = 1;
            for (int k = 0; k < kr; k++) kn *= (size_t)kd[k];
            bd[0] = (hsize_t)(l->nparams - kn);
            if (write_var(g, "0", kr, kd, w) < 0 || write_var(g, "1", 1, bd, w + kn) < 0) rc = -1;
        }
        if (g >= 0) H5Gclose(g);
        if (lg >= 0) H5Gclose(lg);
    }
    H5Gclose(layers);
    if (rc >= 0) {
        hid_t g = vars_group(f, "vars", "sequential");
        if (g < 0) rc = -1;
        else H5Gclose(g);
    }
    return rc;
}

static int export_locked(const char *path, const struct dt_model *m, const float *params, const float *buffers,
                         dt_status *st)
{
    char tmp[4096];
    st->code = DT_OK;
    if (dt_model_is_branched(m))
        return dt_fail(st, DT_EUSAGE, "--export-keras %s: model %s has add or route layers, and the export writes "
                       "Keras Sequential models only; save a checkpoint (--checkpoint-dir) instead", path, m->name);
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return dt_fail(st, DT_EUSAGE, "--export-keras %s: path too long", path);
    H5E_auto2_t fn;
    void *data;
    H5Eget_auto2(H5E_DEFAULT, &fn, &data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* our message, not HDF5's stack */
    /* Created by us first, so H5Fcreate (which follows links) truncates our own file. */
    int fd = dt_create_fresh(tmp);
    if (fd < 0) {
        int e = errno;
        H5Eset_auto2(H5E_DEFAULT, fn, data);
        return dt_fail(st, DT_ERUNTIME, "--export-keras %s: cannot create %s: %s", path, tmp, strerror(e));
    }
    close(fd);
    errno = 0;
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = f < 0 ? -1 : write_all(f, m, params, buffers);
    if (f >= 0 && H5Fclose(f) < 0) rc = -1;
    H5Eset_auto2(H5E_DEFAULT, fn, data);
    if (f < 0 || rc < 0) {
        int e = errno;
        unlink(tmp);
        return dt_fail(st, DT_ERUNTIME, "--export-keras %s: cannot write %s (%s)", path, f < 0 ? "the file" : "the weights",
                       e ? strerror(e) : "HDF5 error");
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return dt_fail(st, DT_ERUNTIME, "--export-keras %s: rename: %s", path, strerror(e));
    }
    return DT_OK;
}

int dt_keras_export(const char *path, const struct dt_model *m, const float *params, const float *buffers,
                    dt_status *st)
{
    dt_h5_lock(); /* runtime/h5lock.h */
    int rc = export_locked(path, m, params, buffers, st);
    dt_h5_unlock();
    return rc;
}
