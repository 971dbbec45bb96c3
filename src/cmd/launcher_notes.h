/* launcher_notes.h — the launcher's failure notices held back until the job's status is known. A
 * clean stop (every rank saved and exited 99, ZT_EXIT_PREEMPTED) is no failure, yet mpirun prints two
 * boxes for it ("Primary job terminated normally, but N process returned a non-zero exit code", "mpirun
 * detected that one or more processes exited with non-zero status ... Exit code: 99") and srun one
 * line a task ("srun: error: HOST: task N: Exited with exit code 99"), which tell a user the run
 * failed. `run` passes the launcher's stderr through this filter: every other line goes on at once,
 * those are held, and are written when the job ends with any other status. */
#ifndef ZT_LAUNCHER_NOTES_H
#define ZT_LAUNCHER_NOTES_H

#include <stddef.h>

#include "util/util.h"

typedef struct zt_launcher_notes {
    int out_fd;       /* where lines go on (2) */
    char line[1024];  /* the line being read (a longer one goes on in pieces) */
    size_t len;
    char *dashes;     /* a box's top border, held until the next line says what the box is */
    zt_sb held;       /* the held notices */
    int in_box;       /* inside a held box, up to its bottom border */
} zt_launcher_notes;

void zt_launcher_notes_feed(zt_launcher_notes *f, const char *data, size_t n);
/* The end of the stream: a partial line goes on; the held notices too unless CLEAN_STOP. Frees. */
void zt_launcher_notes_end(zt_launcher_notes *f, int clean_stop);

#endif
