// A stand-in MPI library for tests/inject/fake_program.c (`fake_program handoff mpi`): the
// blocking calls the recorder's interposer (inject/host_sync.c) stands in front of, doing
// nothing. Handles are integers of a register's width, as MPICH's ints and Open MPI's
// pointers both pass.
#include <stdint.h>

int MPI_Barrier(uintptr_t comm) {
    (void)comm;
    return 0;
}

int MPI_Send(const void *buf, int count, uintptr_t type, int dest, int tag, uintptr_t comm) {
    (void)buf, (void)count, (void)type, (void)dest, (void)tag, (void)comm;
    return 0;
}

int MPI_Recv(void *buf, int count, uintptr_t type, int source, int tag, uintptr_t comm, void *status) {
    (void)buf, (void)count, (void)type, (void)source, (void)tag, (void)comm, (void)status;
    return 0;
}
