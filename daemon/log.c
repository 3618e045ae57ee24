/*
 * log.c - one line per message on stderr, written with a single write(2)
 * so lines from the loop and the workers never interleave.
 */
#include "daemon/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int log_verbosity = LOG_INFO;

static pthread_once_t journal_once = PTHREAD_ONCE_INIT;
static int to_journal;

/* systemd.exec(5): a service whose stderr is connected to the journal gets
 * JOURNAL_STREAM=DEV:INODE naming that stream. Only when stderr is still
 * that very file does the journal read the "<N>" prefix; a redirected
 * stderr inherits the variable but not the meaning. */
static void journal_detect(void)
{
        const char *env = getenv("JOURNAL_STREAM");
        unsigned long long dev, ino;
        struct stat st;
        char tail;

        if (!env || sscanf(env, "%llu:%llu%c", &dev, &ino, &tail) != 2)
                return;
        if (fstat(STDERR_FILENO, &st) == 0 && (unsigned long long)st.st_dev == dev &&
            (unsigned long long)st.st_ino == ino)
                to_journal = 1;
}

static const char *level_word(enum log_level level)
{
        switch (level) {
        case LOG_ERR:
                return "error";
        case LOG_WARN:
                return "warning";
        case LOG_INFO:
                return "info";
        default:
                return "debug";
        }
}

/* Writes the line's prefix into line (at least 64 bytes); returns its
 * length. The journal stamps its lines itself; elsewhere the local time to
 * the millisecond tells when, and a word how bad. */
static int log_prefix(char *line, size_t cap, enum log_level level)
{
        struct timespec ts;
        struct tm tm;
        int n;

        if (to_journal)
                return snprintf(line, cap, "<%d>gemmd: ", (int)level);
        clock_gettime(CLOCK_REALTIME, &ts);
        localtime_r(&ts.tv_sec, &tm);
        n = (int)strftime(line, cap, "%Y-%m-%d %H:%M:%S", &tm);
        return n + snprintf(line + n, cap - (size_t)n, ".%03ld gemmd: %s: ",
                            ts.tv_nsec / 1000000, level_word(level));
}

void log_msg(enum log_level level, const char *fmt, ...)
{
        char line[1024];
        va_list ap;
        int n;

        if ((int)level > log_verbosity)
                return;
        pthread_once(&journal_once, journal_detect);
        n = log_prefix(line, sizeof(line), level);
        va_start(ap, fmt);
        n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
        va_end(ap);
        if (n > (int)sizeof(line) - 2)
                n = (int)sizeof(line) - 2;
        line[n++] = '\n';
        (void)!write(STDERR_FILENO, line, (size_t)n);
}
