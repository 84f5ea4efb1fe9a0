"""test_deploy_images.py — the Dockerfiles: stages, the build replayed, runtime
libraries, the postgres image.

  test_dockerfile_stages                 build stage runs tests/tools/setup.sh (as CI
                                         does), slim runtime, non-root, healthcheck
  test_dockerfile_build_stage_emulated   the build stage's COPY/ENV/RUN replayed in
                                         a temp dir: the binaries it installs exist
  test_runtime_packages_cover_libraries  every shared library of the binaries comes
                                         from the runtime stage's packages
  test_postgres_image                    wal2json, wal_level=logical, init files

What CI can check of docker/ without a Docker engine (the other parts:
test_deploy_*.py; shared helpers: deploy_helpers.py).
"""

import glob
import os
import re
import shlex
import shutil
import subprocess

import pytest

from deploy_helpers import (DOCKERFILE, PG_DOCKERFILE, REPO, RUNTIME_PACKAGES, _binary, exec_form,
                            parse_dockerfile, postgres_image_cmd_settings, postgres_init_files)


# --------------------------------------------------------------------------
# Dockerfiles
# --------------------------------------------------------------------------

def test_dockerfile_stages():
    stages = parse_dockerfile(DOCKERFILE)
    assert len(stages) >= 2, stages
    build_name, build_base, build = stages[0]
    assert build_base.startswith("debian:bookworm"), build_base
    runs = [a for i, a in build if i == "RUN"]
    # The build is CI's script, not a copy of its steps.
    assert any(re.search(r"\bbash tests/tools/setup\.sh\b", r) for r in runs), runs
    with open(os.path.join(REPO, "tests", "run.sh")) as f:
        assert "bash tests/tools/setup.sh" in f.read(), "CI no longer runs tests/tools/setup.sh"
    # ...with only the build packages: no PostgreSQL server or test tools in the stage.
    envs = " ".join(a for i, a in build if i in ("ENV", "ARG")) + " ".join(runs)
    assert "OUTBOX_BUILD_ONLY=1" in envs, envs
    assert "OUTBOX_SKIP_APT" not in envs

    run_name, run_base, runtime = stages[-1]
    assert run_base == "debian:bookworm-slim", run_base
    installs = " ".join(a for i, a in runtime if i == "RUN")
    m = re.search(r"apt-get install ([^&;]+)", installs)
    assert m, installs
    pkgs = {p for p in m.group(1).split() if not p.startswith("-")}
    assert RUNTIME_PACKAGES <= pkgs, pkgs
    assert not {p for p in pkgs if p.endswith("-dev") or p in ("curl", "build-essential")}, pkgs
    assert "rm -rf /var/lib/apt/lists" in installs
    users = [a for i, a in runtime if i == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0"), users
    ep = exec_form([a for i, a in runtime if i == "ENTRYPOINT"][-1])
    assert ep and os.path.basename(ep[0]) == "outbox-relay", ep
    hc = [a for i, a in runtime if i == "HEALTHCHECK"]
    assert hc and ("healthcheck" in hc[-1] or "healthz" in hc[-1] or " status" in hc[-1]), hc
    copies = [a for i, a in runtime if i == "COPY"]
    assert any("--from=" + (build_name or "0") in c for c in copies), copies
    # Files copied from the context exist.
    for instr_args in [a for i, a in runtime + build if i == "COPY"]:
        parts = shlex.split(instr_args)
        if any(p.startswith("--from=") for p in parts):
            continue
        for src in [p for p in parts if not p.startswith("--")][:-1]:
            assert glob.glob(os.path.join(REPO, src)), "COPY source %s missing" % src
    ignore = DOCKERFILE + ".dockerignore"
    assert os.path.isfile(ignore)
    with open(ignore) as f:
        text = f.read()
    assert not re.search(r"^!build", text, re.M), "the build dir must stay out of the context"


def test_dockerfile_build_stage_emulated(tmp_path):
    """Replays the build stage without an engine: its COPY lines into a
    temp dir standing for the image root, its ENV, its RUN lines with bash
    (apt skipped: the packages are installed here). The binaries it
    installs for the runtime stage come out and run."""
    stages = parse_dockerfile(DOCKERFILE)
    name, base, build = stages[0]
    root = str(tmp_path / "root")
    os.makedirs(root)

    def in_root(path):
        return os.path.join(root, path.lstrip("/"))

    workdir = "/"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    env["OUTBOX_SKIP_APT"] = "1"
    for instr, args in build:
        if instr == "WORKDIR":
            workdir = os.path.join(workdir, args)
            os.makedirs(in_root(workdir), exist_ok=True)
        elif instr == "COPY":
            parts = [p for p in shlex.split(args) if not p.startswith("--")]
            srcs, dest = parts[:-1], parts[-1]
            dest = dest if dest.startswith("/") else os.path.join(workdir, dest)
            for src in srcs:
                for m in glob.glob(os.path.join(REPO, src)):
                    target = in_root(dest)
                    if os.path.isdir(m):
                        shutil.copytree(m, target, dirs_exist_ok=True,
                                        ignore=shutil.ignore_patterns("__pycache__"))
                    else:
                        if dest.endswith("/") or dest in (".", "./"):
                            os.makedirs(target, exist_ok=True)
                        shutil.copy2(m, target)
        elif instr == "ENV":
            for kv in shlex.split(args):
                k, v = kv.split("=", 1)
                env[k] = v
        elif instr == "RUN":
            cmd = re.sub(r"(?<![\w.])/out/", root + "/out/", args)
            res = subprocess.run(["bash", "-ec", cmd], cwd=in_root(workdir), env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 timeout=900)
            assert res.returncode == 0, "RUN %s failed:\n%s" % (args, res.stdout[-4000:])
    # What the runtime stage takes from this one exists, and works.
    runtime = stages[-1][2]
    for instr, args in runtime:
        if instr == "COPY" and "--from=" in args:
            src = [p for p in shlex.split(args) if not p.startswith("--")][0]
            assert os.path.exists(in_root(src)), "runtime stage copies %s, not built" % src
    for b in ("outbox-relay", "outbox-consume"):
        path = in_root("/out/usr/local/bin/" + b)
        res = subprocess.run([path, "--version"], stdout=subprocess.PIPE, text=True, timeout=10)
        assert res.returncode == 0 and b in res.stdout, res.stdout
        # stripped: no symbol table left
        out = subprocess.run(["file", path], stdout=subprocess.PIPE, text=True).stdout \
            if shutil.which("file") else "stripped"
        assert "not stripped" not in out, out


def packages_of(paths):
    """{path: package} for files dpkg knows, trying each path as given, its
    real path and its /usr-merged twin; one dpkg -S call."""
    candidates = {}
    for p in paths:
        real = os.path.realpath(p)
        for c in (p, real, real[4:] if real.startswith("/usr/") else "/usr" + real):
            candidates.setdefault(c, p)
    res = subprocess.run(["dpkg", "-S"] + sorted(candidates), stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, timeout=60)
    out = {}
    for line in res.stdout.splitlines():
        pkg, _, path = line.partition(": ")
        if path.strip() in candidates:
            out[candidates[path.strip()]] = pkg.split(",")[0].split(":")[0].strip()
    return out


def installed_closure(pkgs):
    """pkgs and everything they Depend / Pre-Depend on, recursively, as
    installed here (dpkg-query: fast, and the libraries are installed since
    the binaries were linked against them). For an alternative "a | b" every
    installed one counts."""
    closure, todo = set(), list(pkgs)
    while todo:
        batch = sorted({p for p in todo if p not in closure})
        todo = []
        if not batch:
            break
        closure.update(batch)
        res = subprocess.run(["dpkg-query", "-W", "-f", "${Package}\t${Depends}, ${Pre-Depends}\n"]
                             + batch, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True, timeout=60)
        for line in res.stdout.splitlines():
            deps = line.split("\t", 1)[1]
            for dep in deps.split(","):
                for alt in dep.split("|"):
                    name = alt.strip().split(" ")[0].split(":")[0]
                    if name:
                        todo.append(name)
    return closure


def test_runtime_packages_cover_libraries():
    """Every shared library the two binaries load belongs to a package the
    runtime stage installs or one they depend on, so the slim image needs
    nothing more."""
    if shutil.which("dpkg-query") is None:
        pytest.skip("not a Debian system")
    stages = parse_dockerfile(DOCKERFILE)
    installs = " ".join(a for i, a in stages[-1][2] if i == "RUN")
    m = re.search(r"apt-get install ([^&;]+)", installs)
    pkgs = [p for p in m.group(1).split() if not p.startswith("-")]
    closure = installed_closure(pkgs)
    # What every Debian image has.
    closure |= {"libc6", "libgcc-s1", "libstdc++6", "zlib1g"}
    missing = []
    for b in ("outbox-relay", "outbox-consume"):
        out = subprocess.run(["ldd", _binary(b)], stdout=subprocess.PIPE, text=True).stdout
        libs = re.findall(r"=>\s+(/\S+)", out)
        owners = packages_of(libs)
        for lib in libs:
            pkg = owners.get(lib)
            if pkg is None:
                missing.append("%s: %s belongs to no package" % (b, lib))
            elif pkg not in closure:
                missing.append("%s: %s from %s" % (b, lib, pkg))
    assert not missing, "not in the runtime image:\n" + "\n".join(missing)


def test_postgres_image():
    stages = parse_dockerfile(PG_DOCKERFILE)
    name, base, instrs = stages[-1]
    assert base == "postgres:15-bookworm", base
    runs = " ".join(a for i, a in instrs if i == "RUN")
    assert re.search(r"postgresql-(\$PG_MAJOR|15)-wal2json", runs), runs
    settings = postgres_image_cmd_settings()
    assert settings.get("wal_level") == "logical", settings
    assert int(settings.get("max_replication_slots", "10")) >= 2
    assert int(settings.get("max_wal_senders", "10")) >= 2
    assert "max_slot_wal_keep_size" in settings, settings
    names = [n for n, _ in postgres_init_files()]
    for want in ("001_outbox.sql", "002_processed_events.sql", "003_relay_role.sql"):
        assert want in names, names
    scripts = [src for n, src in postgres_init_files() if n.endswith(".sh")]
    for src in scripts:
        assert os.access(src, os.X_OK), "%s is not executable (the entrypoint would source it)" % src
        res = subprocess.run(["bash", "-n", src], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        assert res.returncode == 0, res.stdout
