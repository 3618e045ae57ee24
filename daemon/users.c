/*
 * users.c - the allow-list and the per-user table.
 */
#include "daemon/users.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/loop.h"
#include "daemon/session.h"
#include "gemmd.h"

static int listed(const uint32_t *v, uint32_t n, uint32_t id)
{
        for (uint32_t i = 0; i < n; i++)
                if (v[i] == id)
                        return 1;
        return 0;
}

/* Whether the peer of `fd` is a member of one of gids[0 .. n): its
 * primary group, or one of its supplementary groups as they were at
 * connect() (SO_PEERGROUPS). Returns 1 or 0. */
static int in_groups(const uint32_t *gids, uint32_t n, int fd, const struct ucred *cred)
{
        gid_t small[64], *groups = small;
        socklen_t len = sizeof(small);
        int ok = 0;

        if (!n)
                return 0;
        if (listed(gids, n, cred->gid))
                return 1;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0) {
                if (errno != ERANGE || !(groups = malloc(len)))
                        return 0;
                if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0)
                        len = 0;
        }
        for (size_t i = 0; i < len / sizeof(gid_t) && !ok; i++)
                ok = listed(gids, n, groups[i]);
        if (groups != small)
                free(groups);
        return ok;
}

int users_allowed(const struct gemmd_config *cfg, int fd, const struct ucred *cred)
{
        if (!cfg->n_allow_uids && !cfg->n_allow_gids)
                return 1;
        return listed(cfg->allow_uids, cfg->n_allow_uids, cred->uid) ||
               in_groups(cfg->allow_gids, cfg->n_allow_gids, fd, cred);
}

int users_admin(const struct gemmd_config *cfg, int fd, const struct ucred *cred)
{
        return cred->uid == 0 || in_groups(cfg->admin_gids, cfg->n_admin_gids, fd, cred);
}

struct user *users_get(struct server *srv, uint32_t uid)
{
        struct user *u;

        for (u = srv->users; u; u = u->next)
                if (u->uid == uid) {
                        u->sessions++;
                        return u;
                }
        if (posix_memalign((void **)&u, 64, sizeof(*u)))
                return NULL;
        memset(u, 0, sizeof(*u));
        u->shares = calloc((size_t)srv->nworkers, sizeof(*u->shares));
        u->ulanes = calloc((size_t)srv->nworkers * NPRIO, sizeof(*u->ulanes));
        if (!u->shares || !u->ulanes) {
                free(u->shares);
                free(u->ulanes);
                free(u);
                return NULL;
        }
        for (int i = 0; i < srv->nworkers; i++)
                for (int p = 0; p < NPRIO; p++)
                        u->ulanes[i * NPRIO + p].sh = &u->shares[i];
        u->uid = uid;
        u->sessions = 1;
        u->next = srv->users;
        if (srv->users)
                srv->users->prev = u;
        srv->users = u;
        return u;
}

int users_map_take(struct session *s, uint64_t rid)
{
        return users_map_take_n(s, rid, 1);
}

int users_map_take_n(struct session *s, uint64_t rid, unsigned n)
{
        struct server *srv = s->srv;
        const struct limits *lim = &srv->cfg->lim;
        unsigned user, all;
        int over;

        /* Checked and counted under the lock the user's sessions on other
         * loops take: they can only give back meanwhile, never take. */
        pthread_mutex_lock(&srv->lock);
        user = atomic_load(&s->user->mappings);
        all = atomic_load(&srv->mappings);
        over = user >= lim->max_user_buffers || all + n > lim->max_mappings;
        if (!over) {
                atomic_fetch_add(&s->user->mappings, 1);
                atomic_fetch_add(&srv->mappings, n);
        }
        pthread_mutex_unlock(&srv->lock);
        if (!over)
                return 0;
        if (user >= lim->max_user_buffers)
                session_send_error(s, rid, GEMMD_ELIMIT, -1,
                                   "uid %d holds %u buffers and rings mapped, the most one user may "
                                   "(--max-user-buffers %u)",
                                   (int)s->cred.uid, user, lim->max_user_buffers);
        else
                session_send_error(s, rid, GEMMD_ELIMIT, -1,
                                   "the daemon holds %u buffers and rings mapped for all users, the "
                                   "most it may (--max-mappings %u)",
                                   all, lim->max_mappings);
        return GEMMD_ELIMIT;
}

void users_map_give(struct session *s)
{
        users_map_give_n(s, 1);
}

void users_map_give_n(struct session *s, unsigned n)
{
        atomic_fetch_sub(&s->user->mappings, 1);
        atomic_fetch_sub(&s->srv->mappings, n);
}

void users_map_pass(struct session *s, struct gbuf *b)
{
        b->counted[0] = &s->user->mappings;
        b->counted[1] = &s->srv->mappings;
}

uint64_t users_inline_room(struct session *s)
{
        const struct limits *lim = &s->srv->cfg->lim;
        uint64_t mine = atomic_load(&s->inline_held), user = atomic_load(&s->user->inline_held);
        uint64_t a = mine < lim->max_session_inline_bytes ? lim->max_session_inline_bytes - mine : 0;
        uint64_t b = user < lim->max_user_inline_bytes ? lim->max_user_inline_bytes - user : 0;

        return a < b ? a : b;
}

int users_inline_take(struct session *s, uint64_t n)
{
        const uint64_t max = s->srv->cfg->lim.max_user_inline_bytes;
        uint_fast64_t held = atomic_load(&s->user->inline_held);

        if (!n)
                return 0;
        /* Compare and swap, not the server's lock, which the submit has
         * already taken once: the user's sessions on other loops take and
         * give back meanwhile, and a swap that lost to them tries again
         * with what they left. */
        do {
                if (held + n > max)
                        return GEMMD_EBUSY;
        } while (!atomic_compare_exchange_weak(&s->user->inline_held, &held, held + n));
        atomic_fetch_add(&s->inline_held, n);
        return 0;
}

void users_inline_give(struct session *s, uint64_t n)
{
        if (!n)
                return;
        atomic_fetch_sub(&s->inline_held, n);
        atomic_fetch_sub(&s->user->inline_held, n);
}

void users_put(struct server *srv, struct user *u)
{
        if (!u || --u->sessions)
                return;
        if (u->prev)
                u->prev->next = u->next;
        else
                srv->users = u->next;
        if (u->next)
                u->next->prev = u->prev;
        free(u->shares);
        free(u->ulanes);
        free(u);
}
