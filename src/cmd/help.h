/* help.h — every command's help from one table (help.c): `zerotrain help`, `zerotrain help CMD`,
 * `zerotrain CMD --help` / `-h`, `zerotrain --version`, the usage line a command's argument error
 * ends with, and docs/cli.md (`zerotrain help --format md`, checked against the file by
 * test/t_cli_help.py). main.c answers help before MPI, the BLAS choice or a GPU: help needs none. */
#ifndef ZT_CMD_HELP_H
#define ZT_CMD_HELP_H

#include <stdio.h>

#define ZT_VERSION "0.9.0"

/* 1 when ARGV (argv[1] the command) asks for help or the version; then prints it and sets *RC. */
int zt_help_answer(int argc, char **argv, int *rc);
/* The command's synopsis lines ("usage: zerotrain CMD ..."), for an argument error's second line. */
void zt_help_usage(FILE *f, const char *cmd);
/* The one wording for an argument CMD does not take (VALUE: the argument after it, or NULL):
 * "CMD: unknown option '--x' (did you mean '--y'?)", "CMD: bad value 'V' for --opt",
 * "CMD: --opt needs a value", or "CMD: unexpected argument 'X'" (a word that is not an option). */
void zt_help_bad_argument_text(const char *cmd, const char *arg, const char *value, char *buf, size_t cap);
/* Prints that as the one error line, then CMD's usage; returns 2 (a usage error's status). */
int zt_help_bad_argument(const char *cmd, const char *arg, const char *value);
/* "zerotrain: error: CMD: missing WHAT", then CMD's usage; returns 2. */
int zt_help_missing(const char *cmd, const char *what);

#endif
