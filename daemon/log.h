/*
 * log.h - gemmd's log lines on stderr. Under journald (stderr is the
 * journal's stream) each line starts with sd-daemon(3)'s "<N>" level prefix
 * and the journal adds the time; elsewhere (a terminal, a pipe, a file) it
 * starts with the local time and the level in words.
 */
#ifndef GEMMD_LOG_H
#define GEMMD_LOG_H

enum log_level { LOG_ERR = 3, LOG_WARN = 4, LOG_INFO = 6, LOG_DEBUG = 7 };

extern int log_verbosity; /* lines above this level are dropped */

void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_err(...) log_msg(LOG_ERR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#endif
