/* MPI backend: the data movement of the CPU path (hvd_backend_mpi, see
 * backend.h), and the MPI pieces other backends use.  Called on the engine
 * thread only. */
#ifndef HVD_BACKEND_MPI_H
#define HVD_BACKEND_MPI_H

#include <mpi.h>
#include <stddef.h>

#include "../../base/check.h"
#include "backend.h"

/* MPI's text for an error code (a per-thread buffer). */
const char *hvd_mpi_msg(int rc);
#define HVD_CHECK_MPI(call, what) HVD_CHECK_CODE_(int, call, MPI_SUCCESS, hvd_mpi_msg, what)
#define HVD_CHECK_MPI_GOTO(call, what, label) HVD_CHECK_CODE_GOTO_(int, call, MPI_SUCCESS, hvd_mpi_msg, what, label)

int hvd_mpi_backend_init(void);
void hvd_mpi_backend_fini(void);
MPI_Datatype hvd_mpi_dtype(hvd_dtype_t dtype);
/* The MPI op of op on dtype (a user op for the 16-bit floats; HVD_AVG: sum). */
MPI_Op hvd_mpi_op(hvd_dtype_t dtype, hvd_op_t op);

/* MPI_Reduce_scatter: this rank's counts[rank] elements of the reduction go
 * to out; in NULL: in place (out holds every element). */
int hvd_mpi_reducescatter(const void *in, void *out, const int *counts, hvd_dtype_t dtype, hvd_op_t op,
                          MPI_Comm comm);
/* Alltoall of rows: send_rows[j] rows (of row_elems elements) to rank j of
 * comm; recv_rows gets the rows from each, *out a malloc'd buffer of all
 * received rows (*total_rows of them), in rank order.  MPI_ERR_COUNT (with
 * err) past INT_MAX elements. */
int hvd_mpi_alltoall(const void *in, const int64_t *send_rows, size_t row_elems, hvd_dtype_t dtype, void **out,
                     int64_t *recv_rows, int64_t *total_rows, MPI_Comm comm, char *err, size_t errlen);

#endif
