/*
 * progress_record.h — exactly-once delivery's progress record and the rules
 * read from it. Pure: no I/O.
 *
 * With --delivery exactly-once each Kafka transaction carries, besides the
 * events of whole PostgreSQL transactions in commit order, one progress
 * record on a compacted topic (--progress-topic): key = the server's
 * system identifier, ".", the slot's name (progress_record_key), value =
 * the JSON object below. The system identifier in the key keeps two
 * PostgreSQL clusters with a slot of the same name apart on one progress
 * topic: compaction keeps one record per key, and neither reads the
 * other's (progress_record_owner). A Kafka commit with its progress record is
 * the only truth about what was published: on start the relayer reads the
 * slot's last committed record (read_committed) and skips every PostgreSQL
 * transaction whose commit LSN is at or below its lsn (progress_skip).
 *
 * The value, one line, keys in this order when written, read in any order
 * (unknown keys are ignored, so a later version may add some):
 *
 *   {"format":"outbox-relay-progress","version":1,
 *    "system_identifier":"7315822473925382512","slot":"outbox_relay",
 *    "database":"shop","lsn":"0/16B3748",
 *    "transactional_id":"outbox-relay.7315822473925382512.outbox_relay",
 *    "committed_at":"2026-12-05T01:02:03.123Z"}
 *
 *   format            always "outbox-relay-progress": says what the record is
 *   version           1; a record of a higher version is refused (a newer
 *                     relayer wrote it and may mean more by it)
 *   system_identifier the PostgreSQL cluster's (IDENTIFY_SYSTEM; kept by a
 *                     physical replica and after its promotion). Records
 *                     written before it was added lack it, and their key
 *                     is the slot's name alone: see progress_record_owner
 *   slot              the replication slot (also in the key)
 *   database          the slot's database: a record of another database
 *                     under the same slot name is another source, refused
 *   lsn               end of the commit record of the last PostgreSQL
 *                     transaction inside the Kafka transaction (LSN_FMT)
 *   transactional_id  the producer's transactional.id, for people
 *   committed_at      UTC time the relayer asked Kafka to commit, for people
 *
 * Values are written without escapes (slot and database names are plain
 * identifiers, the others ours); a value with a backslash is refused.
 */
#ifndef OUTBOX_RELAY_PROGRESS_RECORD_H
#define OUTBOX_RELAY_PROGRESS_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "outbox_relay/base/lsn.h"

#define PROGRESS_RECORD_FORMAT "outbox-relay-progress"
#define PROGRESS_RECORD_VERSION 1
#define PROGRESS_VALUE_MAX 1024 /* room enough for any record we write */
#define PROGRESS_NAME_MAX 256   /* slot, database, transactional id (+ NUL) */

#define PROGRESS_SYSID_MAX 32 /* a uint64 in decimal (+ NUL), with room */

struct progress_record {
    int version;
    char system_id[PROGRESS_SYSID_MAX]; /* "" in a record written before it was added */
    char slot[PROGRESS_NAME_MAX];
    char database[PROGRESS_NAME_MAX];
    lsn_t lsn;
    char transactional_id[PROGRESS_NAME_MAX];
    int64_t committed_at_ms; /* Unix ms; 0 = not known */
};

/* Writes rec's value into buf (NUL-terminated). Returns its length, or -1
 * when it does not fit or a name holds a character we do not write
 * ('"', '\\' or a control character). */
int progress_record_format(const struct progress_record *rec, char *buf, size_t cap);

/* Reads a value of len bytes into *rec. Returns 0, or -1 with the reason in
 * err: not a progress record, a version above ours, a missing or malformed
 * slot or lsn, a name too long. */
int progress_record_parse(const char *buf, size_t len, struct progress_record *rec, char *err,
                          size_t errlen);

/* The record's key for a slot of the cluster system_id: system_id + "." +
 * slot, or the slot alone when system_id is NULL or "" (not known; also
 * the key of the records written before the system identifier was added).
 * Returns its length, or -1 when it does not fit in cap. */
int progress_record_key(const char *system_id, const char *slot, char *buf, size_t cap);

/* Whose a record read under the slot's keys is, for the relayer of cluster
 * system_id (known, not "") whose transactional.id is txn_id:
 *   PROGRESS_OURS     its system_identifier is ours; or, written before
 *                     the field was added, its transactional_id is ours
 *                     (which carries our system identifier)
 *   PROGRESS_FOREIGN  another cluster's: its system_identifier, or the one
 *                     in its transactional_id ("outbox-relay.<id>.<slot>"),
 *                     is another; never read as ours
 *   PROGRESS_UNKNOWN  neither says: written by a relayer that put no system
 *                     identifier anywhere ("outbox-relay.<slot>"). Taking
 *                     it could skip events another cluster sent (a loss),
 *                     so the caller refuses it and says how to go on. */
enum progress_owner { PROGRESS_OURS, PROGRESS_FOREIGN, PROGRESS_UNKNOWN };
enum progress_owner progress_record_owner(const struct progress_record *rec,
                                          const char *system_id, const char *txn_id);

/* The skip rule: a PostgreSQL transaction whose commit ends at commit_end
 * is already in Kafka when that is at or below the committed progress. */
bool progress_skip(lsn_t progress, lsn_t commit_end);

/* Where replication starts: after both the slot's confirmed position and
 * the committed progress. The server sends only transactions whose commit
 * record starts at or after it (so ends after it): exactly those
 * progress_skip keeps. */
lsn_t progress_start_lsn(lsn_t slot_confirmed, lsn_t progress);

/* The producer's transactional.id for a slot: "outbox-relay." + the
 * server's system identifier + "." + slot, the same on every restart and on
 * every replica of the same slot (and after a promotion, which keeps the
 * system identifier), so that whichever replica initialises last fences the
 * others; a slot of the same name on another PostgreSQL cluster relaying to
 * the same Kafka has another, so that the two never fence each other.
 * system_id NULL or "" (not known yet) gives "outbox-relay." + slot.
 * Returns its length, or -1 when it does not fit in cap. */
int progress_transactional_id(const char *system_id, const char *slot, char *buf, size_t cap);

/* The partition of the progress topic that holds key (of len bytes) among
 * nparts (> 0): FNV-1a, so writer and reader agree without asking the
 * client's partitioner. */
int32_t progress_partition(const char *key, size_t len, int32_t nparts);

#endif
