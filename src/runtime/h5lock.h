/* h5lock.h: one lock around the HDF5 library.
 *
 * HDF5 built for MPI-IO cannot also be built thread-safe, and Debian's is
 * not: no two threads may be inside the library at once. Since
 * --checkpoint-async writes a checkpoint on a thread of its own while
 * training goes on, the HDF5 entry points that can run during training take
 * this lock: the checkpoint writer and reader (checkpoint/), the Keras
 * export, and dt_dataset_read (the batches and the validation split read
 * through HDF5). The writer thread holds it for a whole file, so a read on
 * the main thread waits for the write to end; the batches that --prefetch's
 * thread reads with pread(2) never wait.
 *
 * No deadlock across ranks: whoever holds the lock waits only on ranks that
 * are doing the same HDF5 work (the writers' collectives involve the other
 * ranks' writers, on a communicator of their own), never on a main thread. */
#ifndef DT_H5LOCK_H
#define DT_H5LOCK_H

void dt_h5_lock(void);
void dt_h5_unlock(void);

#endif
