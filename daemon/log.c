/*
 * log.c - one line per message on stderr, written with a single write(2)
 * so lines from the loop and the workers never interleave.
 */
#include "daemon/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

int log_verbosity = LOG_INFO;

void log_msg(enum log_level level, const char *fmt, ...)
{
        char line[1024];
        va_list ap;
        int n;

        if ((int)level > log_verbosity)
                return;
        n = snprintf(line, sizeof(line), "<%d>gemmd: ", (int)level);
        va_start(ap, fmt);
        n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
        va_end(ap);
        if (n > (int)sizeof(line) - 2)
                n = (int)sizeof(line) - 2;
        line[n++] = '\n';
        (void)!write(STDERR_FILENO, line, (size_t)n);
}
