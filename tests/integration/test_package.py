"""test_package.py — installing outbox-relay: man pages, `cmake --install`, the
Debian package.

  test_man_page_documents_every_option   each program's --help options (and the
                                         relayer's commands) are exactly the man
                                         page's, with the same defaults
  test_man_pages_render_without_warnings groff -ww and man --warnings say nothing
  test_cmake_install                     cmake --install into a temporary prefix:
                                         the expected files, the unit's ExecStart
                                         pointing at the installed binary
  test_debian_package                    cpack -G DEB from the build tree: the
                                         metadata (Depends from what the binaries
                                         link, the file list), then dpkg -i on this
                                         machine, the installed programs, pages
                                         and unit (systemd-analyze verify), the
                                         installed `outbox-relay check` against a
                                         test PostgreSQL cluster, and dpkg --purge:
                                         the machine as it was

test_debian_package needs root (CI runs as root on a throwaway machine) and
skips otherwise, or when the package is already installed here (it could
not leave the machine as it was).
"""

import gzip
import os
import re
import shutil
import subprocess
import time

import pytest

import harness

REPO = harness.REPO_ROOT
MAN = os.path.join(REPO, "docs", "man")
PROGRAMS = ("outbox-relay", "outbox-consume")
PACKAGE = "outbox-relay"
IN_CI = os.environ.get("CI", "").lower() == "true"

# What the package holds, under /usr (or the --prefix of cmake --install).
INSTALLED = {
    "bin/outbox-relay",
    "bin/outbox-consume",
    "lib/systemd/system/outbox-relay.service",
    "share/man/man1/outbox-relay.1.gz",
    "share/man/man1/outbox-consume.1.gz",
    "share/doc/outbox-relay/examples/outbox-relay.conf.example",
    "share/outbox-relay/prometheus/outbox-relay.rules.yml",
    "share/outbox-relay/prometheus/outbox-relay.rules.test.yml",
} | {"share/outbox-relay/sql/" + os.path.relpath(os.path.join(d, f), os.path.join(REPO, "sql"))
     for d, _, files in os.walk(os.path.join(REPO, "sql")) for f in files if f.endswith(".sql")}


def run(argv, timeout=120, check=True, **kw):
    res = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         timeout=timeout, **kw)
    if check and res.returncode != 0:
        raise AssertionError("%s exited %d:\n%s%s" % (" ".join(argv), res.returncode,
                                                     res.stdout[-3000:], res.stderr[-3000:]))
    return res


def clean_env():
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("OUTBOX_RELAY_", "OUTBOX_CONSUME_"))}


def tool(name):
    """The path of a tool the test needs: missing fails in CI (setup.sh
    installs it) and skips elsewhere."""
    path = shutil.which(name)
    if path is None:
        msg = "%s not installed (tests/tools/setup.sh installs it)" % name
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)
    return path


# --------------------------------------------------------------------------
# --help against the man page
# --------------------------------------------------------------------------

OPT_TOKEN = re.compile(r"(?<![\w-])(--[a-z][a-z-]*|-[A-Za-z])(?![\w-])")


def help_text(program):
    return run([os.path.join(harness.build_dir(), program), "--help"], env=clean_env()).stdout


def help_options(program):
    """{option: (line, default or None)} of the option lines of --help, and
    the commands of its usage lines."""
    text = help_text(program)
    options, commands = {}, []
    for line in text.splitlines():
        m = re.match(r"^\s+\S*%s \[?([a-z]+)\]? " % re.escape(program), line)
        if m:
            commands.append(m.group(1))
        if not line.startswith("  -"):
            continue
        words = line[2:].split(" ")
        names = [words[0].rstrip(",")] + ([words[1]] if words[0].endswith(",") else [])
        d = re.search(r"\(default: (.*)\)$", line)
        for opt in names:
            assert OPT_TOKEN.fullmatch(opt), line
            options[opt] = (line, d.group(1) if d else None)
    return options, commands


def roff_text(s):
    for a, b in ((r"\-", "-"), (r"\(em", "—"), (r"\(oq", "'"), (r"\(cq", "'"),
                 (r"\(lq", '"'), (r"\(rq", '"'), (r"\e", "\\"), (r"\&", "")):
        s = s.replace(a, b)
    return re.sub(r"\\f[BIRP]", "", s)


def man_sections(program):
    with open(os.path.join(MAN, program + ".1")) as f:
        src = f.read()
    sections, name = {}, None
    for line in src.splitlines():
        if line.startswith(".SH "):
            name = line[4:].strip().strip('"')
            sections[name] = []
        elif name:
            sections[name].append(line)
    return src, sections


def man_entries(lines):
    """[(tag line, body text)] of the .TP entries of a section."""
    entries, i = [], 0
    while i < len(lines):
        if lines[i].startswith(".TP") and i + 1 < len(lines):
            tag, body = lines[i + 1], []
            i += 2
            while i < len(lines) and not lines[i].startswith((".TP", ".SH")):
                body.append(lines[i])
                i += 1
            entries.append((tag, roff_text(" ".join(body))))
        else:
            i += 1
    return entries


@pytest.mark.parametrize("program", PROGRAMS)
def test_man_page_documents_every_option(program):
    """docs/man/PROGRAM.1 names every option of PROGRAM --help and no other,
    with its placeholder and default, and (outbox-relay) every command of
    its usage lines: an option or command added to the program without its
    man page entry fails here."""
    options, commands = help_options(program)
    assert len(options) >= 10 and "--help" in options and "-X" in options, options
    _, sections = man_sections(program)
    assert "OPTIONS" in sections, "%s.1 has no OPTIONS section" % program
    documented = {}
    for tag, body in man_entries(sections["OPTIONS"]):
        for opt in OPT_TOKEN.findall(roff_text(tag)):
            documented[opt] = (tag, body)
    assert sorted(set(options) - set(documented)) == [], \
        "options of %s --help missing from docs/man/%s.1" % (program, program)
    assert sorted(set(documented) - set(options)) == [], \
        "docs/man/%s.1 documents options %s --help does not have" % (program, program)
    for opt, (line, default) in options.items():
        tag, body = documented[opt]
        for placeholder in re.findall(r'" ([^"]+)"', tag):
            assert placeholder in line, (opt, placeholder, line)
        if default is not None:
            assert "Default: %s." % default in body, \
                "docs/man/%s.1: %s should say 'Default: %s.': %s" % (program, opt, default, body)
    entries = {roff_text(tag).split()[-1] for tag, _ in man_entries(sections.get("COMMANDS", []))}
    assert sorted(set(commands) - entries) == [], \
        "commands of %s --help missing from the COMMANDS section of docs/man/%s.1" % (
            program, program)
    assert sorted(entries - set(commands)) == [], "man page commands %s --help lacks" % program


def render_warnings(page):
    """The warnings groff (-ww, every warning) and man (--warnings) print
    for a page, source or gzipped."""
    out = []
    groff = tool("groff")
    with (gzip.open(page, "rt") if page.endswith(".gz") else open(page)) as f:
        src = f.read()
    res = run([groff, "-man", "-Tutf8", "-ww", "-z"], input=src)
    out += res.stderr.splitlines()
    man = tool("man")
    env = dict(os.environ, MANWIDTH="80", MANPAGER="cat", PAGER="cat", LC_ALL="C.UTF-8")
    res = run([man, "--warnings", "-l", page], env=env)
    out += res.stderr.splitlines()
    assert "SYNOPSIS" in res.stdout and "OPTIONS" in res.stdout, res.stdout[:500]
    return out


@pytest.mark.parametrize("program", PROGRAMS)
def test_man_pages_render_without_warnings(program):
    page = os.path.join(MAN, program + ".1")
    assert render_warnings(page) == []
    src, sections = man_sections(program)
    assert re.search(r'^\.TH %s 1 .*"outbox-relay %s"' % (program.upper(), version()), src, re.M), \
        "the .TH line should name version %s" % version()


def version():
    out = run([os.path.join(harness.build_dir(), "outbox-relay"), "--version"],
              env=clean_env()).stdout
    return out.splitlines()[0].split()[-1]


def assert_version(out, program):
    """--version: "<program> <version>", then the libraries it runs with."""
    lines = out.splitlines()
    assert lines[0] == "%s %s" % (program, version()), out
    assert re.fullmatch(r"librdkafka \d+\.\d+\.\d+\S*", lines[1]), out
    assert re.fullmatch(r"libpq \d+\.\d+", lines[2]), out


# --------------------------------------------------------------------------
# cmake --install
# --------------------------------------------------------------------------

def unit_execstart(path):
    with open(path) as f:
        return re.search(r"^ExecStart=(\S+)", f.read(), re.M).group(1)


def test_cmake_install(tmp_path):
    """Everything lands under the prefix; the unit runs the binary installed
    there; the man pages are the docs/man sources, gzipped."""
    prefix = tmp_path / "prefix"
    run(["cmake", "--install", harness.build_dir(), "--prefix", str(prefix)])
    files = {os.path.relpath(os.path.join(d, f), prefix)
             for d, _, fs in os.walk(prefix) for f in fs}
    assert files == INSTALLED
    assert unit_execstart(prefix / "lib/systemd/system/outbox-relay.service") == \
        str(prefix / "bin/outbox-relay")
    for program in PROGRAMS:
        with gzip.open(prefix / "share/man/man1" / (program + ".1.gz"), "rt") as f, \
                open(os.path.join(MAN, program + ".1")) as g:
            assert f.read() == g.read()
        out = run([str(prefix / "bin" / program), "--version"], env=clean_env()).stdout
        assert_version(out, program)


# --------------------------------------------------------------------------
# the Debian package
# --------------------------------------------------------------------------

def dpkg(*args, timeout=300):
    """dpkg, waiting for its lock while another dpkg or apt holds it."""
    deadline = time.monotonic() + timeout
    while True:
        res = run(["dpkg"] + list(args), check=False, timeout=timeout)
        if res.returncode == 0 or "lock" not in res.stderr or time.monotonic() > deadline:
            return res
        time.sleep(2)


def installed(package):
    res = run(["dpkg-query", "-W", "-f=${Status}", package], check=False)
    return res.returncode == 0 and "installed" in res.stdout.split()


def account_exists(db, name):
    return run(["getent", db, name], check=False).returncode == 0


def needed_libraries(binary):
    """The DT_NEEDED sonames of an ELF file and where the loader finds them."""
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]",
                        run(["readelf", "-d", binary]).stdout)
    where = dict(re.findall(r"^\s*(\S+) => (\S+)", run(["ldd", binary]).stdout, re.M))
    return {n: where.get(n) for n in needed}


def owner_package(path):
    res = run(["dpkg-query", "-S", os.path.realpath(path)], check=False)
    if res.returncode != 0:  # merged /usr: dpkg knows the /lib path
        res = run(["dpkg-query", "-S", path], check=False)
    assert res.returncode == 0, "no package owns %s" % path
    return res.stdout.split(":")[0]


def test_debian_package(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("installs the .deb with dpkg -i: needs root (CI runs as root)")
    if shutil.which("dpkg") is None:
        pytest.skip("not a Debian system (no dpkg)")
    if installed(PACKAGE):
        pytest.skip("%s is already installed on this machine: the test would not leave it "
                    "as it was" % PACKAGE)
    build = harness.build_dir()
    run(["cpack", "-G", "DEB", "--config", os.path.join(build, "CPackConfig.cmake"),
         "-B", str(tmp_path)], timeout=600)
    debs = [f for f in os.listdir(tmp_path) if f.endswith(".deb")]
    assert debs == ["%s_%s_amd64.deb" % (PACKAGE, version())] or \
        (len(debs) == 1 and debs[0].startswith("%s_%s_" % (PACKAGE, version()))), debs
    deb = str(tmp_path / debs[0])

    # Metadata: the name, version and the Depends dpkg-shlibdeps derived.
    fields = {f: run(["dpkg-deb", "-f", deb, f]).stdout.strip()
              for f in ("Package", "Version", "Depends", "Maintainer", "Description")}
    assert fields["Package"] == PACKAGE and fields["Version"] == version(), fields
    depends = {d.split()[0] for d in fields["Depends"].split(", ")}
    assert {"libpq5", "librdkafka1", "libmicrohttpd12", "libc6"} <= depends, fields["Depends"]
    # Every library the binaries link comes from a package of Depends.
    for program in PROGRAMS:
        for soname, path in needed_libraries(os.path.join(build, program)).items():
            assert path, "%s: %s not found by the loader" % (program, soname)
            assert owner_package(path) in depends, \
                "%s links %s (package %s), not in Depends: %s" % (
                    program, soname, owner_package(path), fields["Depends"])
    listing = run(["dpkg-deb", "-c", deb]).stdout
    files = {re.sub(r"^\./usr/", "", line.split()[-1]) for line in listing.splitlines()
             if not line.startswith("d")}
    assert files == INSTALLED, sorted(files ^ INSTALLED)
    for line in listing.splitlines():
        if line.split()[-1] in ("./usr/bin/outbox-relay", "./usr/bin/outbox-consume"):
            assert line.startswith("-rwxr-xr-x root/root"), line
    for script in ("postinst", "postrm"):
        assert run(["dpkg-deb", "-I", deb, script]).stdout.startswith("#!/bin/sh"), script

    user_existed = account_exists("passwd", "outbox-relay")
    group_existed = account_exists("group", "outbox-relay")
    etc_existed = os.path.exists("/etc/outbox-relay")
    res = dpkg("-i", deb)
    try:
        assert res.returncode == 0, res.stdout + res.stderr
        assert installed(PACKAGE)
        check_installed(tmp_path)
    finally:
        res = dpkg("--purge", PACKAGE)
        if not user_existed and account_exists("passwd", "outbox-relay"):
            run(["userdel", "outbox-relay"], check=False)
        if not group_existed and account_exists("group", "outbox-relay"):
            run(["groupdel", "outbox-relay"], check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert not installed(PACKAGE)
    for path in ["/usr/bin/outbox-relay", "/usr/bin/outbox-consume",
                 "/usr/lib/systemd/system/outbox-relay.service", "/usr/share/outbox-relay"]:
        assert not os.path.lexists(path), "%s left behind by dpkg --purge" % path
    if not etc_existed:
        assert not os.path.exists("/etc/outbox-relay"), "purge left /etc/outbox-relay"


def check_installed(tmp_path):
    """The installed package as a user meets it."""
    for program in PROGRAMS:
        path = "/usr/bin/" + program
        res = run([path, "--version"], env=clean_env())
        assert_version(res.stdout, program)
        page = "/usr/share/man/man1/%s.1.gz" % program
        assert render_warnings(page) == []
        man = tool("man")
        res = run([man, "-w", program], env=dict(os.environ, MANPATH="/usr/share/man"))
        assert res.stdout.strip() == page, res.stdout
    for f in INSTALLED:
        assert os.path.exists("/usr/" + f), f

    # postinst: the service user, and the config it can read but others not.
    assert account_exists("passwd", "outbox-relay")
    st = os.stat("/etc/outbox-relay/outbox-relay.conf")
    assert (st.st_mode & 0o777) == 0o640 and st.st_uid == 0, oct(st.st_mode)
    assert st.st_gid == int(run(["getent", "group", "outbox-relay"]).stdout.split(":")[2])
    with open("/etc/outbox-relay/outbox-relay.conf") as f, \
            open("/usr/share/doc/outbox-relay/examples/outbox-relay.conf.example") as g:
        assert f.read() == g.read()
    # As the unit runs it: the service user reads the config, every line of
    # which the binary accepts (--help after --config exits 0, 2 on a bad line).
    res = run(["setpriv", "--reuid=outbox-relay", "--regid=outbox-relay", "--init-groups",
               "/usr/bin/outbox-relay", "--config", "/etc/outbox-relay/outbox-relay.conf",
               "--help"], env=clean_env(), check=False)
    assert res.returncode == 0, res.stderr

    unit = "/usr/lib/systemd/system/outbox-relay.service"
    assert unit_execstart(unit) == "/usr/bin/outbox-relay"
    sa = tool("systemd-analyze")
    res = run([sa, "verify", unit], check=False)
    assert res.returncode == 0 and (res.stdout + res.stderr).strip() == "", \
        res.stdout + res.stderr

    check_preflight(str(tmp_path))


def check_preflight(log_dir):
    """The installed `outbox-relay check` against a test PostgreSQL cluster
    set up from the installed sql/ (and the mock broker): every check
    passes, exit 0; with the broker gone, the Kafka check fails, exit 1."""
    pg = harness.PgCluster(settings={"wal_sender_timeout": "60s",
                                     "max_slot_wal_keep_size": "1GB"}, load_schema=False)
    broker = None
    try:
        pg.load_sql_dir("/usr/share/outbox-relay/sql")
        pg.query("INSERT INTO events_outbox (aggregate_id, type, payload) "
                 "VALUES (gen_random_uuid(), 'order.placed', '{}')")
        broker = harness.MockBroker(log_dir)
        broker.create_topic("order")
        argv = ["/usr/bin/outbox-relay", "check", "--dsn", pg.dsn(user="outbox_relay"),
                "--brokers", broker.bootstrap]
        res = run(argv, env=clean_env(), check=False)
        assert res.returncode == 0, res.stdout + res.stderr
        lines = [line for line in res.stdout.splitlines() if not line.startswith("check:")]
        assert len(lines) >= 18 and all(line.startswith("PASS ") for line in lines), res.stdout
        broker.cmd("down")
        res = run(argv + ["--format", "json"], env=clean_env(), check=False)
        assert res.returncode == 1, res.stdout + res.stderr
        assert '{"check": "kafka", "status": "FAIL"' in res.stdout, res.stdout
    finally:
        if broker is not None:
            broker.cleanup()
        pg.cleanup()
