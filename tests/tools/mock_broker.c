/*
 * mock_broker.c — a Kafka-protocol broker for the integration tests and the
 * demo: librdkafka's mock cluster behind real TCP listeners on 127.0.0.1,
 * steered by one-line commands on stdin.
 *
 * Usage: mock-broker [--brokers N] [--partitions N] [--advertise PORT,...]
 *
 * On start it prints exactly one line, "BOOTSTRAP host:port[,host:port...]",
 * to stdout. Then every line read from stdin is one command, answered with
 * one line, "ok" or "err <message>":
 *
 *   down [broker_id|-1]              stop a broker (default -1 = all): its
 *                                    connections close and new ones are
 *                                    refused until "up"; the port is kept
 *   up [broker_id|-1]                accept connections again
 *   error <ApiKey> <err> [count]     the next <count> (default 1) requests
 *                                    of <ApiKey> (0 = Produce, 1 = Fetch,
 *                                    3 = Metadata, ...) fail with <err>
 *   clear-errors <ApiKey>            drop the pending errors of <ApiKey>
 *   topic <name> [partitions]        create a topic (default --partitions)
 *   topic-error <name> <err>         Metadata reports <err> for the topic
 *                                    (0 clears it); creates the topic if
 *                                    absent, like the mock cluster does
 *   rtt <broker_id|-1> <ms>          delay every response by <ms>
 *   apiversion <ApiKey> <min> <max>  the versions of <ApiKey> the brokers
 *                                    advertise (rd_kafka_mock_set_apiversion);
 *                                    "apiversion 3 0 4" makes Metadata v4 the
 *                                    newest, so a consumer's Metadata request
 *                                    no longer auto-creates (see below)
 *   quit                             answer ok and exit 0
 *
 * <err> is a number (rd_kafka_resp_err_t, e.g. 6, -195) or a name as
 * rd_kafka_err2name() prints it, with or without "RD_KAFKA_RESP_ERR_"
 * (e.g. NOT_LEADER_FOR_PARTITION, _TRANSPORT).
 *
 * --advertise PORT[,PORT...] (one per broker, loopback only): broker i
 * still listens on a port of its own, but Metadata (and the BOOTSTRAP line)
 * name 127.0.0.1:PORT_i instead, so that a test can put a proxy
 * (tests/tools/fault_proxy.py) on PORT_i in front of it and every client
 * connection goes through the proxy. A second line, "LISTEN
 * 127.0.0.1:port[,...]", then gives the ports the brokers really listen on.
 * librdkafka 2.0.2's mock cluster has no setting for its advertised
 * listener (src/rdkafka_mock.c takes it from getsockname() on the listener
 * it binds to a port the kernel picks), so this program interposes bind()
 * and getsockname() on those listeners; without --advertise they pass
 * everything through unchanged.
 *
 * MOCK_BROKER_DEBUG=mock (any librdkafka "debug" list) in the environment
 * traces the mock cluster on stderr: every request, and the group
 * coordinator's states ("changing state Joining -> Syncing"), which is
 * how a slow rebalance in a test is read. The harness passes the
 * environment through, so it reaches every test's broker log.
 *
 * EOF on stdin, SIGTERM or SIGINT destroy the cluster and exit 0, so a test
 * harness that dies still takes its broker with it (the pipe closes).
 *
 * Topic auto-creation in librdkafka 2.0.2's mock cluster (read from
 * src/rdkafka_mock.c and src/rdkafka_mock_handlers.c at tag v2.0.2):
 *  - a Metadata request naming an unknown topic creates it when the request
 *    allows auto-creation (ApiVersion < 4, or AllowAutoTopicCreation set).
 *    librdkafka producers allow it by default, consumers do not
 *    (allow.auto.create.topics defaults to false for them), so the first
 *    produce to a new topic creates it and a consumer that only assigns
 *    sees UNKNOWN_TOPIC_OR_PART until something produced to it or it was
 *    created with the "topic" command;
 *  - a Produce request for an unknown topic is NOT an auto-create: it
 *    answers UNKNOWN_TOPIC_OR_PART (clients always fetch metadata first);
 *  - auto-created topics get the cluster default of 4 partitions and
 *    replication factor min(3, brokers). 2.0.2 has no public setter for
 *    that default, so --partitions cannot change it: it only sets the
 *    default partition count of the "topic" command. Pre-create a topic
 *    with "topic <name> <n>" when a test needs a different count;
 *  - rd_kafka_mock_topic_set_error() also creates the topic when absent;
 *  - the mock advertises Metadata up to v2, which has no
 *    AllowAutoTopicCreation field: there EVERY Metadata request naming an
 *    unknown topic creates it, a consumer's subscription included. After
 *    "apiversion 3 0 4" clients send v4 with the flag, and only producers
 *    create topics, as on a real broker with auto.create.topics.enable;
 *  - 2.0.2's mock cannot add partitions to an existing topic (no API).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#define LINE_MAX_LEN 4096

struct broker_state {
    rd_kafka_t *rk;                 /* hosts the cluster; never produces */
    rd_kafka_mock_cluster_t *mcluster;
    int broker_cnt;
    int default_partitions;
};

/* --advertise: the i-th loopback listener librdkafka binds (brokers are
 * created in id order) is advertised as adv[i].port. Set before the
 * cluster exists, then read by librdkafka's thread under adv_mu. */
static int parse_long(const char *s, long lo, long hi, long *out);

#define ADV_MAX 16
static struct advertised {
    int fd;          /* the listener, -1 while not bound */
    uint16_t port;   /* advertised */
    uint16_t real;   /* where it listens */
} adv[ADV_MAX];
static int adv_cnt, adv_used;
static pthread_mutex_t adv_mu = PTHREAD_MUTEX_INITIALIZER;

static int real_getsockname(int fd, struct sockaddr *addr, socklen_t *len)
{
    static int (*fn)(int, struct sockaddr *, socklen_t *);
    if (fn == NULL)
        fn = (int (*)(int, struct sockaddr *, socklen_t *))dlsym(RTLD_NEXT, "getsockname");
    return fn(fd, addr, len);
}

static int is_loopback4(const struct sockaddr *addr, socklen_t len)
{
    const struct sockaddr_in *sin = (const struct sockaddr_in *)addr;
    return addr != NULL && len >= sizeof *sin && sin->sin_family == AF_INET &&
           (ntohl(sin->sin_addr.s_addr) >> 24) == 127;
}

/* A listener bound to port 0 becomes the next advertised broker; one bound
 * to an advertised port (re-created after "down"/"up") goes back to its
 * real port. */
int bind(int fd, const struct sockaddr *addr, socklen_t len)
{
    static int (*fn)(int, const struct sockaddr *, socklen_t);
    if (fn == NULL)
        fn = (int (*)(int, const struct sockaddr *, socklen_t))dlsym(RTLD_NEXT, "bind");
    if (adv_cnt == 0 || !is_loopback4(addr, len))
        return fn(fd, addr, len);
    struct sockaddr_in sin = *(const struct sockaddr_in *)addr;
    int slot = -1, rc;
    pthread_mutex_lock(&adv_mu);
    for (int i = 0; i < adv_used; i++)
        if (sin.sin_port != 0 && ntohs(sin.sin_port) == adv[i].port)
            slot = i;
    if (slot < 0 && sin.sin_port == 0 && adv_used < adv_cnt)
        slot = adv_used++;
    if (slot >= 0 && adv[slot].real != 0)
        sin.sin_port = htons(adv[slot].real);
    rc = fn(fd, (const struct sockaddr *)&sin, sizeof sin);
    if (rc == 0 && slot >= 0) {
        struct sockaddr_in got;
        socklen_t glen = sizeof got;
        adv[slot].fd = fd;
        if (real_getsockname(fd, (struct sockaddr *)&got, &glen) == 0)
            adv[slot].real = ntohs(got.sin_port);
    }
    pthread_mutex_unlock(&adv_mu);
    return rc;
}

int getsockname(int fd, struct sockaddr *addr, socklen_t *len)
{
    int rc = real_getsockname(fd, addr, len);
    if (rc != 0 || adv_cnt == 0 || !is_loopback4(addr, *len))
        return rc;
    struct sockaddr_in *sin = (struct sockaddr_in *)addr;
    pthread_mutex_lock(&adv_mu);
    for (int i = 0; i < adv_used; i++)
        if (adv[i].fd == fd && adv[i].real == ntohs(sin->sin_port))
            sin->sin_port = htons(adv[i].port);
    pthread_mutex_unlock(&adv_mu);
    return rc;
}

/* "p1,p2,..." into adv[]; 0 on success. */
static int parse_advertise(const char *s)
{
    char copy[256], *save = NULL;
    long v;
    snprintf(copy, sizeof copy, "%s", s);
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (adv_cnt == ADV_MAX || parse_long(tok, 1, 65535, &v) != 0)
            return -1;
        adv[adv_cnt].fd = -1;
        adv[adv_cnt++].port = (uint16_t)v;
    }
    return adv_cnt > 0 ? 0 : -1;
}

/* Written by the signal handler, read by the poll loop. */
static int signal_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    ssize_t r = write(signal_pipe[1], &b, 1);
    (void)r;
    errno = saved;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: mock-broker [--brokers N (default 1)] "
            "[--partitions N (default 4)]\n"
            "prints BOOTSTRAP host:port[,...] then reads commands on stdin:\n"
            "  down [id|-1] | up [id|-1] | error <ApiKey> <err> [count] |\n"
            "  clear-errors <ApiKey> | topic <name> [partitions] |\n"
            "  topic-error <name> <err> | rtt <id|-1> <ms> |\n"
            "  apiversion <ApiKey> <min> <max> | quit\n"
            "--advertise PORT,...: advertise these ports (put a proxy there)\n");
}

/* Parses a whole decimal integer in [lo, hi]; 0 on success. */
static int parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    long v;

    if (s == NULL || *s == '\0')
        return -1;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* Accepts an error code as a number or as its rd_kafka_err2name() name. */
static int parse_err(const char *s, rd_kafka_resp_err_t *out)
{
    const struct rd_kafka_err_desc *descs;
    size_t cnt, i;
    long v;

    if (parse_long(s, INT_MIN, INT_MAX, &v) == 0) {
        *out = (rd_kafka_resp_err_t)v;
        return 0;
    }
    if (strncasecmp(s, "RD_KAFKA_RESP_ERR_", 18) == 0)
        s += 18;
    rd_kafka_get_err_descs(&descs, &cnt);
    for (i = 0; i < cnt; i++) {
        if (descs[i].name != NULL && strcasecmp(descs[i].name, s) == 0) {
            *out = descs[i].code;
            return 0;
        }
    }
    return -1;
}

static void reply_ok(void)
{
    fputs("ok\n", stdout);
    fflush(stdout);
}

static void reply_err(const char *fmt, ...)
{
    va_list ap;

    fputs("err ", stdout);
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
}

/* Broker id argument: absent means all brokers (-1). */
static int parse_broker_id(const char *s, int32_t *out)
{
    long v;

    if (s == NULL) {
        *out = -1;
        return 0;
    }
    if (parse_long(s, -1, INT32_MAX, &v) != 0)
        return -1;
    *out = (int32_t)v;
    return 0;
}

/*
 * Runs one command line and prints its answer. Returns 1 when the broker
 * should exit, 0 otherwise.
 */
static int run_command(struct broker_state *st, char *line)
{
    char *argv[8];
    int argc = 0;
    char *save = NULL;
    char *tok;
    rd_kafka_resp_err_t err;
    int32_t id;
    long v1, v2;

    for (tok = strtok_r(line, " \t\r", &save); tok != NULL && argc < 8;
         tok = strtok_r(NULL, " \t\r", &save))
        argv[argc++] = tok;
    if (tok != NULL) {
        reply_err("too many arguments");
        return 0;
    }
    if (argc == 0) {
        reply_err("empty command");
        return 0;
    }

    if (strcmp(argv[0], "quit") == 0) {
        reply_ok();
        return 1;
    }

    if (strcmp(argv[0], "down") == 0 || strcmp(argv[0], "up") == 0) {
        if (argc > 2 || parse_broker_id(argc == 2 ? argv[1] : NULL, &id)) {
            reply_err("usage: %s [broker_id|-1]", argv[0]);
            return 0;
        }
        err = argv[0][0] == 'd'
                  ? rd_kafka_mock_broker_set_down(st->mcluster, id)
                  : rd_kafka_mock_broker_set_up(st->mcluster, id);
        if (err)
            reply_err("%s", rd_kafka_err2str(err));
        else
            reply_ok();
        return 0;
    }

    if (strcmp(argv[0], "error") == 0) {
        rd_kafka_resp_err_t *errs;
        long i;

        if (argc < 3 || argc > 4 || parse_long(argv[1], 0, INT16_MAX, &v1) ||
            parse_err(argv[2], &err) ||
            parse_long(argc == 4 ? argv[3] : "1", 1, 1000000, &v2)) {
            reply_err("usage: error <ApiKey> <errcode|name> [count]");
            return 0;
        }
        errs = malloc((size_t)v2 * sizeof(*errs));
        if (errs == NULL) {
            reply_err("out of memory");
            return 0;
        }
        for (i = 0; i < v2; i++)
            errs[i] = err;
        rd_kafka_mock_push_request_errors_array(st->mcluster, (int16_t)v1,
                                                (size_t)v2, errs);
        free(errs);
        reply_ok();
        return 0;
    }

    if (strcmp(argv[0], "clear-errors") == 0) {
        if (argc != 2 || parse_long(argv[1], 0, INT16_MAX, &v1)) {
            reply_err("usage: clear-errors <ApiKey>");
            return 0;
        }
        rd_kafka_mock_clear_request_errors(st->mcluster, (int16_t)v1);
        reply_ok();
        return 0;
    }

    if (strcmp(argv[0], "topic") == 0) {
        int rf = st->broker_cnt < 3 ? st->broker_cnt : 3;

        if (argc < 2 || argc > 3 ||
            parse_long(argc == 3 ? argv[2] : "0", 0, 100000, &v1)) {
            reply_err("usage: topic <name> [partitions]");
            return 0;
        }
        if (v1 == 0)
            v1 = st->default_partitions;
        err = rd_kafka_mock_topic_create(st->mcluster, argv[1], (int)v1, rf);
        if (err)
            reply_err("%s: %s", rd_kafka_err2name(err), rd_kafka_err2str(err));
        else
            reply_ok();
        return 0;
    }

    if (strcmp(argv[0], "topic-error") == 0) {
        if (argc != 3 || parse_err(argv[2], &err)) {
            reply_err("usage: topic-error <name> <errcode|name>");
            return 0;
        }
        rd_kafka_mock_topic_set_error(st->mcluster, argv[1], err);
        reply_ok();
        return 0;
    }

    if (strcmp(argv[0], "rtt") == 0) {
        if (argc != 3 || parse_broker_id(argv[1], &id) ||
            parse_long(argv[2], 0, INT_MAX, &v1)) {
            reply_err("usage: rtt <broker_id|-1> <ms>");
            return 0;
        }
        err = rd_kafka_mock_broker_set_rtt(st->mcluster, id, (int)v1);
        if (err)
            reply_err("%s", rd_kafka_err2str(err));
        else
            reply_ok();
        return 0;
    }

    if (strcmp(argv[0], "apiversion") == 0) {
        long v3;

        if (argc != 4 || parse_long(argv[1], 0, INT16_MAX, &v1) ||
            parse_long(argv[2], 0, INT16_MAX, &v2) ||
            parse_long(argv[3], v2, INT16_MAX, &v3)) {
            reply_err("usage: apiversion <ApiKey> <min> <max>");
            return 0;
        }
        err = rd_kafka_mock_set_apiversion(st->mcluster, (int16_t)v1,
                                           (int16_t)v2, (int16_t)v3);
        if (err)
            reply_err("%s", rd_kafka_err2str(err));
        else
            reply_ok();
        return 0;
    }

    reply_err("unknown command '%s'", argv[0]);
    return 0;
}

/*
 * Reads stdin line by line with read(2) — stdio buffering would hide
 * complete lines from poll() — until quit, EOF or a signal.
 */
static void command_loop(struct broker_state *st)
{
    char buf[LINE_MAX_LEN];
    size_t used = 0;
    int discarding = 0; /* inside an over-long line */

    for (;;) {
        struct pollfd fds[2] = {{.fd = STDIN_FILENO, .events = POLLIN},
                                {.fd = signal_pipe[0], .events = POLLIN}};
        ssize_t n;
        char *nl;

        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            perror("mock-broker: poll");
            return;
        }
        if (fds[1].revents)
            return;
        if (!fds[0].revents)
            continue;

        n = read(STDIN_FILENO, buf + used, sizeof(buf) - 1 - used);
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            perror("mock-broker: read stdin");
            return;
        }
        if (n == 0)
            return; /* EOF: an unterminated last line is ignored */
        used += (size_t)n;

        while ((nl = memchr(buf, '\n', used)) != NULL) {
            size_t len = (size_t)(nl - buf);

            *nl = '\0';
            if (discarding) {
                discarding = 0;
                reply_err("line too long");
            } else if (run_command(st, buf)) {
                return;
            }
            memmove(buf, nl + 1, used - len - 1);
            used -= len + 1;
        }
        if (used == sizeof(buf) - 1) {
            discarding = 1;
            used = 0;
        }
    }
}

int main(int argc, char **argv)
{
    struct broker_state st = {.broker_cnt = 1, .default_partitions = 4};
    char errstr[512];
    rd_kafka_conf_t *conf;
    struct sigaction sa;
    sigset_t block, old;
    long v;
    int i;

    for (i = 1; i < argc; i++) {
        if ((strcmp(argv[i], "--brokers") == 0 ||
             strcmp(argv[i], "--partitions") == 0) &&
            i + 1 < argc) {
            if (parse_long(argv[i + 1], 1, 1000, &v) != 0) {
                fprintf(stderr, "mock-broker: %s needs 1..1000, got '%s'\n",
                        argv[i], argv[i + 1]);
                return 2;
            }
            if (argv[i][2] == 'b')
                st.broker_cnt = (int)v;
            else
                st.default_partitions = (int)v;
            i++;
        } else if (strcmp(argv[i], "--advertise") == 0 && i + 1 < argc) {
            if (parse_advertise(argv[++i]) != 0) {
                fprintf(stderr, "mock-broker: --advertise needs PORT[,PORT...] "
                        "(1..65535, at most %d), got '%s'\n", ADV_MAX, argv[i]);
                return 2;
            }
        } else if (strcmp(argv[i], "-h") == 0 ||
                   strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "mock-broker: unknown or incomplete option '%s'\n",
                    argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (st.default_partitions != 4)
        fprintf(stderr,
                "mock-broker: note: auto-created topics still get 4 "
                "partitions (librdkafka has no setter); --partitions %d "
                "applies to the topic command\n",
                st.default_partitions);

    if (pipe(signal_pipe) != 0) {
        perror("mock-broker: pipe");
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    /* librdkafka's threads inherit this mask, so signals reach only the
     * main thread and its poll() below. */
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, &old);

    conf = rd_kafka_conf_new();
    /* Hide the notice that this host instance has no bootstrap.servers. */
    rd_kafka_conf_set(conf, "log_level", "4", errstr, sizeof(errstr));
    /* MOCK_BROKER_DEBUG=mock (a librdkafka "debug" list): the mock
     * cluster's own trace, group coordinator states included, on stderr. */
    {
        const char *dbg = getenv("MOCK_BROKER_DEBUG");
        if (dbg != NULL && *dbg != '\0') {
            rd_kafka_conf_set(conf, "log_level", "7", errstr, sizeof(errstr));
            if (rd_kafka_conf_set(conf, "debug", dbg, errstr, sizeof(errstr)) !=
                RD_KAFKA_CONF_OK) {
                fprintf(stderr, "mock-broker: MOCK_BROKER_DEBUG=%s: %s\n", dbg, errstr);
                rd_kafka_conf_destroy(conf);
                return 2;
            }
        }
    }
    /* rd_kafka_new takes ownership of conf on success only. */
    st.rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    if (st.rk == NULL) {
        fprintf(stderr, "mock-broker: rd_kafka_new: %s\n", errstr);
        rd_kafka_conf_destroy(conf);
        return 1;
    }
    st.mcluster = rd_kafka_mock_cluster_new(st.rk, st.broker_cnt);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (st.mcluster == NULL) {
        fprintf(stderr, "mock-broker: could not create the mock cluster\n");
        rd_kafka_destroy(st.rk);
        return 1;
    }

    if (adv_cnt != 0 && adv_cnt != st.broker_cnt) {
        fprintf(stderr, "mock-broker: --advertise names %d ports for %d brokers\n",
                adv_cnt, st.broker_cnt);
        rd_kafka_mock_cluster_destroy(st.mcluster);
        rd_kafka_destroy(st.rk);
        return 2;
    }
    printf("BOOTSTRAP %s\n", rd_kafka_mock_cluster_bootstraps(st.mcluster));
    if (adv_cnt != 0) {
        pthread_mutex_lock(&adv_mu);
        printf("LISTEN");
        for (i = 0; i < adv_used; i++)
            printf("%s127.0.0.1:%d", i ? "," : " ", adv[i].real);
        printf("\n");
        pthread_mutex_unlock(&adv_mu);
    }
    fflush(stdout);

    command_loop(&st);

    rd_kafka_mock_cluster_destroy(st.mcluster);
    rd_kafka_destroy(st.rk);
    return 0;
}
