/* crc32c.h — CRC32C (Castagnoli, the iSCSI/ext4/NVMe polynomial 0x1EDC6F41, reflected), the checksum
 * of the NVMe swap files' blocks. The SSE4.2 `crc32` instruction computes it at ~8 bytes a cycle; it
 * is chosen at run time (the build targets x86-64-v2, which has it, but a binary built with another
 * MARCH or run on another CPU must still work), with a portable table-driven version as the
 * fallback. Both give the same values: test/test_swap.c checks them against each other and against
 * the published check value ("123456789" -> 0xE3069283). */
#ifndef ZT_CRC32C_H
#define ZT_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* The CRC32C of n bytes continued from crc, the CRC of what came before (0 to start): zt_crc32c(0,
 * "123456789", 9) = 0xE3069283, and zt_crc32c(zt_crc32c(0, a, k), a + k, n - k) = zt_crc32c(0, a, n).
 * The fastest version this CPU runs. */
uint32_t zt_crc32c(uint32_t crc, const void *data, size_t n);

/* The CRC32C of each of the n_blocks blocks of `block` bytes at data (block a multiple of 8) into
 * out[i]: with the instruction, three blocks are run interleaved, since one chain of crc32
 * instructions waits on each result (3 cycles' latency) while the CPU could issue one a cycle. */
void zt_crc32c_blocks(const void *data, size_t block, size_t n_blocks, uint32_t *out);

/* The two versions themselves, for the test and the bench: the portable one always, the SSE4.2 one
 * only where zt_crc32c_hw_available() says so. */
uint32_t zt_crc32c_sw(uint32_t crc, const void *data, size_t n);
int zt_crc32c_hw_available(void);
uint32_t zt_crc32c_hw(uint32_t crc, const void *data, size_t n);
/* zt_crc32c_blocks with a chosen version (hw only where available) */
void zt_crc32c_blocks_with(int hw, const void *data, size_t block, size_t n_blocks, uint32_t *out);

#endif
