/* monitor_writers.h — the two writers the monitors write through (monitor.h's zt_monitor_step):
 * TensorBoard event files (monitor_tb.c) and DeepSpeed's CSV files (monitor_csv.c). Apart from
 * monitor.h, so that the writers, which monitor.c calls, need nothing of monitor.c's. */
#ifndef ZT_MONITOR_WRITERS_H
#define ZT_MONITOR_WRITERS_H

#include <stddef.h>
#include <stdint.h>

#include "util/util.h"

/* one scalar of a step */
typedef struct zt_scalar {
    const char *tag;
    double value;
} zt_scalar;

typedef struct zt_tb_writer zt_tb_writer;
/* Creates DIR/events.out.tfevents.<unix time>.<hostname>.<pid>, writes the file_version record
 * and a SessionLog START at start_step. */
zt_tb_writer *zt_tb_open(const char *dir, long start_step, zt_err *err);
/* One Event at step with a Summary of simple_value scalars, in one write; -1 on a write error
 * (errno says why). */
int zt_tb_write(zt_tb_writer *w, long step, const zt_scalar *v, int n);
const char *zt_tb_path(const zt_tb_writer *w);
void zt_tb_close(zt_tb_writer *w);
/* TFRecord's masked CRC-32C of bytes */
uint32_t zt_crc32c_masked(const void *data, size_t n);

typedef struct zt_csv_writer zt_csv_writer;
/* DeepSpeed's csv_monitor in DIR: one file per tag; rows after keep_upto (the step column) are dropped */
zt_csv_writer *zt_csv_open(const char *dir, long keep_upto, zt_err *err);
int zt_csv_write(zt_csv_writer *w, long step, const zt_scalar *v, int n);
void zt_csv_close(zt_csv_writer *w);

#endif
