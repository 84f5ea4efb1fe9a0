/*
 * partition_gate.c — a partition's second request held until a new
 * producer's first is acknowledged (see partition_gate.h).
 *
 * A short list of topics (a relayer writes to a handful), each with arrays
 * indexed by partition that grow to the highest partition met; a topic's
 * number is its index in the list. The last topic looked up is tried
 * first: consecutive records mostly share one.
 */
#include "outbox_relay/core/partition_gate.h"

#include <stdlib.h>
#include <string.h>

struct gate_topic {
    char *name;
    int32_t npart;          /* length of the two arrays */
    uint32_t *inflight;     /* counted records in flight, by partition */
    double *open_until;     /* monotonic s; 0: not open */
    uint32_t unassigned;    /* records in flight whose partition was unknown */
};

struct partition_gate {
    struct gate_topic *topics;
    size_t ntopics, cap;
    size_t last; /* index of the last topic found */
    unsigned long long lost;
};

struct partition_gate *partition_gate_new(void)
{
    return calloc(1, sizeof(struct partition_gate));
}

void partition_gate_free(struct partition_gate *g)
{
    if (g == NULL)
        return;
    for (size_t i = 0; i < g->ntopics; i++) {
        free(g->topics[i].name);
        free(g->topics[i].inflight);
        free(g->topics[i].open_until);
    }
    free(g->topics);
    free(g);
}

void partition_gate_reset(struct partition_gate *g)
{
    for (size_t i = 0; i < g->ntopics; i++)
        for (int32_t p = 0; p < g->topics[i].npart; p++)
            g->topics[i].open_until[p] = 0;
}

int partition_gate_topic(struct partition_gate *g, const char *topic)
{
    if (g->last < g->ntopics && strcmp(g->topics[g->last].name, topic) == 0)
        return (int) g->last;
    for (size_t i = 0; i < g->ntopics; i++)
        if (strcmp(g->topics[i].name, topic) == 0)
            return (int) (g->last = i);
    if (g->ntopics == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 8;
        struct gate_topic *n = realloc(g->topics, cap * sizeof *n);
        if (n == NULL) {
            g->lost++;
            return -1;
        }
        g->topics = n;
        g->cap = cap;
    }
    char *name = strdup(topic);
    if (name == NULL) {
        g->lost++;
        return -1;
    }
    struct gate_topic *t = &g->topics[g->ntopics];
    memset(t, 0, sizeof *t);
    t->name = name;
    return (int) (g->last = g->ntopics++);
}

static struct gate_topic *at(const struct partition_gate *g, int topic)
{
    return topic >= 0 && (size_t) topic < g->ntopics ? &g->topics[topic] : NULL;
}

/* Grows t's arrays to hold partition; -1 when out of memory. */
static int reach(struct gate_topic *t, int32_t partition)
{
    if (partition < t->npart)
        return 0;
    int32_t n = t->npart ? t->npart : 4;
    while (n <= partition)
        n *= 2;
    uint32_t *inflight = realloc(t->inflight, (size_t) n * sizeof *inflight);
    if (inflight == NULL)
        return -1;
    t->inflight = inflight;
    double *open_until = realloc(t->open_until, (size_t) n * sizeof *open_until);
    if (open_until == NULL)
        return -1;
    t->open_until = open_until;
    for (int32_t p = t->npart; p < n; p++) {
        t->inflight[p] = 0;
        t->open_until[p] = 0;
    }
    t->npart = n;
    return 0;
}

bool partition_gate_topic_clear(const struct partition_gate *g, int topic)
{
    const struct gate_topic *t = at(g, topic);
    return t == NULL || t->unassigned == 0;
}

bool partition_gate_may_send(const struct partition_gate *g, int topic, int32_t partition,
                             double now)
{
    const struct gate_topic *t = at(g, topic);
    if (t == NULL || partition < 0)
        return true;
    if (t->unassigned > 0)
        return false;
    if (partition >= t->npart)
        return true;
    return t->inflight[partition] == 0 || now < t->open_until[partition];
}

int32_t partition_gate_sent(struct partition_gate *g, int topic, int32_t partition)
{
    struct gate_topic *t = at(g, topic);
    if (t == NULL || (partition >= 0 && reach(t, partition) < 0)) {
        g->lost++;
        return PARTITION_GATE_NOT_COUNTED;
    }
    if (partition < 0) {
        t->unassigned++;
        return PARTITION_GATE_UNASSIGNED;
    }
    t->inflight[partition]++;
    return partition;
}

void partition_gate_reported(struct partition_gate *g, int topic, int32_t counted,
                             int32_t partition, bool delivered, double now)
{
    struct gate_topic *t = at(g, topic);
    if (t == NULL)
        return;
    if (counted == PARTITION_GATE_UNASSIGNED && t->unassigned > 0)
        t->unassigned--;
    else if (counted >= 0 && counted < t->npart && t->inflight[counted] > 0)
        t->inflight[counted]--;
    if (delivered && partition >= 0 && reach(t, partition) == 0)
        t->open_until[partition] = now + PARTITION_GATE_OPEN_FOR;
}

unsigned long long partition_gate_lost(const struct partition_gate *g)
{
    return g->lost;
}
