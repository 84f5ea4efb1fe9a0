/*
 * decoder.c — the plugin-neutral half of decoder.h: calls through a
 * decoder's ops. Each plugin is one file of its own (decoder_w2j.c, decoder_pgoutput.c).
 */
#include "outbox_relay/decode/decoder.h"

#include <string.h>

void decoder_free(struct decoder *d)
{
    if (d != NULL)
        d->ops->free(d);
}

const char *decoder_plugin(const struct decoder *d)
{
    return d->ops->plugin;
}

bool decoder_uses_publication(const struct decoder *d)
{
    return d->ops->publication;
}

bool decoder_names_root(const struct decoder *d)
{
    return d->ops->names_root;
}

const char *decoder_package(const struct decoder *d)
{
    return d->ops->package;
}

int decoder_start_options(const struct decoder *d, const struct decoder_slot *slot, char *buf,
                          size_t cap)
{
    return d->ops->start_options(slot, buf, cap);
}

int decoder_decode(struct decoder *d, const char *data, size_t len, lsn_t wal_start,
                   struct decoder_record *rec, char *err, size_t errlen)
{
    return d->ops->decode(d, data, len, wal_start, rec, err, errlen);
}

int decoder_event(struct decoder *d, const struct decoder_record *rec, struct outbox_event *ev,
                  char *err, size_t errlen)
{
    return d->ops->event(d, rec, ev, err, errlen);
}

bool decoder_shaped(struct decoder *d, const struct decoder_record *rec)
{
    return rec->kind == DECODER_INSERT && d->ops->shaped(d, rec);
}

int decoder_table_name(struct decoder *d, const struct decoder_record *rec, char *buf,
                       size_t cap)
{
    if (rec->kind != DECODER_INSERT || cap == 0)
        return -1;
    if (d->ops->table_name != NULL)
        return d->ops->table_name(d, rec, buf, cap);
    if (rec->table == NULL || rec->table_len == 0 || rec->table_len >= cap ||
        memchr(rec->table, '\0', rec->table_len) != NULL)
        return -1;
    memcpy(buf, rec->table, rec->table_len);
    buf[rec->table_len] = '\0';
    return (int) rec->table_len;
}

int decoder_describe(struct decoder *d, const struct decoder_record *rec, const char **out,
                     size_t *len)
{
    *out = rec->data;
    *len = rec->data_len;
    if (d->ops->describe == NULL)
        return 0;
    return d->ops->describe(d, rec, out, len);
}
