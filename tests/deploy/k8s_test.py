#!/usr/bin/python3
"""Renders every overlay of deploy/k8s with `kubectl kustomize` and checks
the objects against the binaries themselves: every flag (in args and in the
ConfigMap flag files) is one the binary lists in --helpfull; every path a
flag names is on a volume mount (writable where the binary writes), secret
files are keys of their Secret; the probes ask the scheduler's --listen
port with dialctl flags that exist; the Service and the workers'
--scheduler agree with it; GPU requests match --gpus and the image; the
pods' grace period covers the worker's drain. The ha overlay (two
schedulers on PostgreSQL) is checked for what a standby needs: the URL and
password from a Secret, Parallel start, one ReadWriteMany checkpoint
volume, egress to PostgreSQL, a readiness probe only the leader passes and
a liveness probe both pass; its live run starts both on a PostgreSQL
server from Debian and kills the leader.

usage: k8s_test.py SOURCE_DIR DIAL_SCHEDULER DIAL_WORKER DIALCTL
Exits 77 (skipped) without kubectl."""

import copy
import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import yaml

SKIP = 77
# Flags whose value is a directory or file the binary writes.
WRITES = {"db", "checkpoint_root", "backup_dir", "checkpoint_cache", "work_dir"}
# Flags whose value is a file the binary reads.
READS = {"tls_cert", "tls_key", "tls_ca", "tls_client_ca", "auth_tokens",
         "secrets_dir", "flagfile", "token_file", "db_password_file"}
# The variables a container's args may name as $(NAME), from its env.


def known_flags(binary):
    """Flag name -> default (a string), from the binary's --helpfull."""
    out = subprocess.run([binary, "--helpfull"], capture_output=True,
                         text=True, check=False).stdout
    flags = {}
    for m in re.finditer(r"^\s+--(\w+) \((.*?)\);(?:\s+default: (\"[^\"]*\"|\S+);)?",
                         out, re.M | re.S):
        flags[m.group(1)] = (m.group(3) or "").strip('"')
    if len(flags) < 10:
        sys.exit(f"could not read the flags of {binary}")
    return flags


def parse_flags(args):
    """['--a-b=1', '--c', ...] -> [('a_b', '1'), ('c', 'true'), ...]"""
    out = []
    for a in args:
        if not a.startswith("--"):
            continue
        name, _, value = a[2:].partition("=")
        out.append((name.replace("-", "_"), value if "=" in a else "true"))
    return out


class Rendered:
    def __init__(self, docs):
        self.docs = [d for d in docs if d]

    def find(self, kind, name=None):
        return [d for d in self.docs if d["kind"] == kind and
                (name is None or d["metadata"]["name"] == name)]


def mount_of(path, mounts):
    """The volumeMount whose mountPath holds path (deepest), or None."""
    best = None
    for m in mounts:
        root = m["mountPath"].rstrip("/") + "/"
        if (path + "/").startswith(root) and (
                best is None or len(root) > len(best["mountPath"])):
            best = m
    return best


def check_workload(obj, rendered, flags_of, errors):
    """Checks one StatefulSet or Deployment; returns its flags (a dict)."""
    name = obj["metadata"]["name"]
    pod = obj["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for claim in obj["spec"].get("volumeClaimTemplates", []):
        volumes[claim["metadata"]["name"]] = {"pvc": claim}
    c = pod["containers"][0]
    where = f"{name}/{c['name']}"
    binary = {"dial-scheduler": "dial-scheduler",
              "dial-worker": "dial-worker"}[name]
    known = flags_of[binary]
    mounts = c.get("volumeMounts", [])
    for m in mounts:
        if m["name"] not in volumes:
            errors.append(f"{where}: mount {m['name']} has no volume")

    def volume_at(path):
        m = mount_of(path, mounts)
        return (m, volumes.get(m["name"])) if m else (None, None)

    def file_in_volume(path, flag):
        m, v = volume_at(path)
        if m is None:
            errors.append(f"{where}: --{flag}={path} is on no volume mount")
            return None
        rel = os.path.relpath(path, m["mountPath"])
        for kind, key_field in (("secret", "secretName"),
                                ("configMap", "name")):
            if kind in v:
                items = v[kind].get("items")
                keys = [i["path"] for i in items] if items else None
                if keys is not None and rel not in keys:
                    errors.append(f"{where}: --{flag}={path}: {kind} "
                                  f"{v[kind][key_field]} mounts no {rel}")
                return kind, v[kind][key_field], rel
        return None

    # Image: the binary's own, tagged.
    image = c["image"]
    if not re.fullmatch(re.escape(binary) + r"(:[\w.-]+)?", image.split("/")[-1]) \
            or ":" not in image.split("/")[-1]:
        errors.append(f"{where}: image {image} is not a tagged {binary} image")

    # Flags: the args, with each --flagfile expanded from its ConfigMap.
    flags = {}
    for flag, value in parse_flags(c.get("args", [])):
        if flag not in known:
            errors.append(f"{where}: {binary} has no flag --{flag}")
        if flag != "flagfile":
            flags[flag] = value
            continue
        found = file_in_volume(value, flag)
        if not found or found[0] != "configMap":
            errors.append(f"{where}: --flagfile={value} is not in a ConfigMap")
            continue
        cms = rendered.find("ConfigMap", found[1])
        text = cms[0]["data"].get(found[2]) if cms else None
        if text is None:
            errors.append(f"{where}: ConfigMap {found[1]} has no {found[2]}")
            continue
        lines = [l.strip() for l in text.splitlines()]
        for f, v in parse_flags(l for l in lines if l and not l.startswith("#")):
            if f not in known:
                errors.append(f"{where}: {found[2]}: {binary} has no flag --{f}")
            flags[f] = v

    # $(NAME) in a value is the container's variable NAME (as Kubernetes
    # expands it); a --db that is a Secret's URL is no path.
    env = {e["name"]: e for e in c.get("env", [])}
    for flag, value in list(flags.items()):
        for name in re.findall(r"\$\((\w+)\)", value):
            if name not in env:
                errors.append(f"{where}: --{flag}={value} names no variable")
    db_env = re.fullmatch(r"\$\((\w+)\)", flags.get("db", ""))
    if db_env:
        ref = env.get(db_env.group(1), {}).get("valueFrom", {})
        if "secretKeyRef" not in ref:
            errors.append(f"{where}: --db={flags['db']} is not a Secret's")
        del flags["db"]
        flags["db_url_secret"] = ref.get("secretKeyRef", {}).get("name", "")

    # Paths: on a mount; what the binary writes on a writable one, never
    # the (read-only) image; what it reads from a Secret or ConfigMap key.
    for flag, value in flags.items():
        if flag in WRITES:
            m, v = volume_at(value)
            if m is None or m.get("readOnly") or v is None or \
                    not ("pvc" in v or "emptyDir" in v or
                         "persistentVolumeClaim" in v):
                errors.append(f"{where}: --{flag}={value} is not on a "
                              "writable volume")
        elif flag in READS and value:
            file_in_volume(value, flag)
    if not c.get("securityContext", {}).get("readOnlyRootFilesystem"):
        errors.append(f"{where}: root filesystem is writable")
    return c, flags


def check(rendered, flags_of, overlay):
    errors = []
    sts = rendered.find("StatefulSet", "dial-scheduler")
    dep = rendered.find("Deployment", "dial-worker")
    svc = rendered.find("Service", "dial-scheduler")
    if len(sts) != 1 or len(dep) != 1 or len(svc) != 1:
        return [f"{overlay}: want a StatefulSet and a Service dial-scheduler "
                "and a Deployment dial-worker"]
    sts, dep, svc = sts[0], dep[0], svc[0]
    ha = sts["spec"].get("replicas") != 1
    if not ha and not sts["spec"].get("volumeClaimTemplates"):
        errors.append("scheduler: no PersistentVolumeClaim")
    if rendered.find("Secret"):
        errors.append("a Secret is in the rendering: keys do not belong in git")

    sc, sflags = check_workload(sts, rendered, flags_of, errors)
    wc, wflags = check_workload(dep, rendered, flags_of, errors)
    if ha:
        errors += check_ha(sts, sc, sflags, rendered)

    # Ports: --listen, the container port, the Service, the workers.
    listen = sflags.get("listen", "")
    port = int(listen.rsplit(":", 1)[1]) if ":" in listen else None
    cports = {p.get("name"): p["containerPort"] for p in sc.get("ports", [])}
    if port not in cports.values():
        errors.append(f"scheduler: --listen={listen} is no containerPort")
    sport = svc["spec"]["ports"][0]
    target = sport["targetPort"]
    if cports.get(target, target) != port:
        errors.append(f"Service targetPort {target} is not --listen's {port}")
    if svc["spec"]["selector"] != sts["spec"]["template"]["metadata"]["labels"]:
        errors.append("Service selector does not select the scheduler pod")
    addr = wflags.get("scheduler", "")
    if addr != f"{svc['metadata']['name']}:{sport['port']}":
        errors.append(f"worker --scheduler={addr} is not the Service "
                      f"{svc['metadata']['name']}:{sport['port']}")

    # TLS: the scheduler serves it, so the workers check it.
    if sflags.get("tls_cert") and not wflags.get("tls_ca"):
        errors.append("worker: the scheduler serves TLS but --tls-ca is unset")

    # Probes: dialctl scheduler health on --listen's port, over TLS; with
    # a standby, readiness is the leader's alone and liveness anyone's.
    for probe in ("readinessProbe", "livenessProbe"):
        cmd = sc.get(probe, {}).get("exec", {}).get("command", [])
        if cmd[:3] != ["dialctl", "scheduler", "health"]:
            errors.append(f"scheduler: {probe} is not dialctl scheduler health")
            continue
        pflags = dict(parse_flags(cmd[3:]))
        want = "dial.live" if ha and probe == "livenessProbe" else ""
        if pflags.get("service", "") != want:
            errors.append(f"scheduler: {probe} asks for health service "
                          f"'{pflags.get('service', '')}', not '{want}'")
        for f in pflags:
            if f not in flags_of["dialctl"]:
                errors.append(f"scheduler: {probe}: dialctl has no flag --{f}")
        if not pflags.get("scheduler", "").endswith(f":{port}"):
            errors.append(f"scheduler: {probe} does not ask port {port}")
        if sflags.get("tls_cert"):
            ca = pflags.get("tls_ca")
            if not ca or not mount_of(ca, sc.get("volumeMounts", [])):
                errors.append(f"scheduler: {probe} has no mounted --tls-ca")

    # Token: a file of a Secret, never a literal nor an environment
    # variable (security round two, H1: a trial read the worker's
    # environment); trials run as another user; no service account token
    # in either pod, and a NetworkPolicy for each (finding 12).
    env = {e["name"] for e in wc.get("env", [])}
    if "token" in wflags or "DIAL_TOKEN" in env:
        errors.append("worker: the token is a flag or a variable")
    token_file = wflags.get("token_file", "")
    mount = mount_of(token_file, wc.get("volumeMounts", [])) if token_file \
        else None
    volumes = {v["name"]: v for v in
               dep["spec"]["template"]["spec"].get("volumes", [])}
    if not mount or "secret" not in volumes.get(mount["name"], {}):
        errors.append("worker: --token-file is not a file of a Secret")
    if not wflags.get("run_as"):
        errors.append("worker: no --run-as: trials run as the worker")
    for name, obj in (("scheduler", sts), ("worker", dep)):
        if obj["spec"]["template"]["spec"].get(
                "automountServiceAccountToken") is not False:
            errors.append(f"{name}: the service account token is mounted")
    policies = {p["spec"]["podSelector"]["matchLabels"].get(
        "app.kubernetes.io/name") for p in rendered.find("NetworkPolicy")}
    for name in ("dial-scheduler", "dial-worker"):
        if name not in policies:
            errors.append(f"no NetworkPolicy selects {name}")

    # Drain: the pod outlives the long poll, the trials' checkpoints and
    # their upload (which gets at most --grace-s while draining).
    wknown = flags_of["dial-worker"]
    grace = int(wflags.get("grace_s", wknown["grace_s"]))
    upload = min(grace, int(wflags.get("upload_wait_s",
                                       wknown["upload_wait_s"]))) \
        if "checkpoint_cache" in wflags else 0
    poll = int(wflags.get("acquire_wait_ms", wknown["acquire_wait_ms"])) / 1000
    period = dep["spec"]["template"]["spec"].get(
        "terminationGracePeriodSeconds", 30)
    if period < poll + grace + upload + 10:
        errors.append(f"worker: terminationGracePeriodSeconds {period} < "
                      f"poll {poll} + --grace-s {grace} + upload {upload} "
                      "+ 10")

    # Resources: GPUs asked for = GPUs named; CUDA image iff GPUs; cores.
    limits = wc.get("resources", {}).get("limits", {})
    gpus = int(limits.get("nvidia.com/gpu", 0))
    named = [g for g in wflags.get("gpus", "").split(",") if g]
    if gpus and len(named) != gpus:
        errors.append(f"worker: {gpus} nvidia.com/gpu but --gpus={named}")
    if not gpus and named:
        errors.append(f"worker: --gpus={named} without nvidia.com/gpu")
    if (gpus > 0) != wc["image"].endswith(":cuda"):
        errors.append(f"worker: image {wc['image']} with {gpus} GPUs")
    cpus = int(wflags.get("cpus", 0))
    slots = int(wflags.get("slots", wknown["slots"]))
    if "cpu" in limits and not 0 < cpus <= float(limits["cpu"]):
        errors.append(f"worker: --cpus={cpus} but a limit of "
                      f"{limits['cpu']} CPUs")
    if cpus and slots > cpus:
        errors.append(f"worker: --slots={slots} > --cpus={cpus}")
    return [f"{overlay}: {e}" for e in errors]


def check_ha(sts, sc, sflags, rendered):
    """A leader and a standby on PostgreSQL (the ha overlay)."""
    errors = []
    if sts["spec"].get("replicas") != 2:
        errors.append("scheduler: replicas is neither 1 nor 2")
    if sts["spec"].get("podManagementPolicy") != "Parallel":
        errors.append("scheduler: not started in Parallel (a standby is "
                      "never Ready, so OrderedReady would wait forever)")
    if sts["spec"].get("volumeClaimTemplates"):
        errors.append("scheduler: a volume per pod: the checkpoints must be "
                      "on one volume both serve")
    if not sflags.get("db_url_secret"):
        errors.append("scheduler: --db is not a PostgreSQL URL from a Secret")
    if not sflags.get("db_password_file"):
        errors.append("scheduler: no --db-password-file")
    if not sflags.get("leader_lease_ms"):
        errors.append("scheduler: no --leader-lease-ms")
    volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
    mount = mount_of(sflags.get("checkpoint_root", ""),
                     sc.get("volumeMounts", []))
    claim = volumes.get(mount["name"], {}).get("persistentVolumeClaim", {}) \
        if mount else {}
    pvcs = [p for p in rendered.find("PersistentVolumeClaim")
            if p["metadata"]["name"] == claim.get("claimName")]
    if not pvcs or "ReadWriteMany" not in pvcs[0]["spec"]["accessModes"]:
        errors.append("scheduler: --checkpoint-root is not on a "
                      "ReadWriteMany PersistentVolumeClaim")
    policy = [p for p in rendered.find("NetworkPolicy")
              if p["metadata"]["name"] == "dial-scheduler"]
    ports = {pt.get("port") for rule in (policy[0]["spec"].get("egress", [])
                                         if policy else [])
             for pt in rule.get("ports", [])}
    if 5432 not in ports:
        errors.append("scheduler: its NetworkPolicy lets it reach no "
                      "PostgreSQL (TCP 5432)")
    return errors


def pod_files(obj, rendered, root, secrets):
    """Lays out a pod's mounts under root (ConfigMap keys, Secret keys from
    the dict secrets {(name, key): path}, empty dirs); returns the mount
    map {mountPath: local dir}."""
    pod = obj["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    mapping = {}
    for m in pod["containers"][0].get("volumeMounts", []):
        local = os.path.join(root, m["mountPath"].strip("/").replace("/", "_"))
        os.makedirs(local, exist_ok=True)
        mapping[m["mountPath"]] = local
        v = volumes.get(m["name"], {})
        if "configMap" in v:
            cm = rendered.find("ConfigMap", v["configMap"]["name"])[0]
            for key, text in cm["data"].items():
                with open(os.path.join(local, key), "w") as f:
                    f.write(text)
        elif "secret" in v:
            for item in v["secret"]["items"]:
                shutil.copy(secrets[(v["secret"]["secretName"], item["key"])],
                            os.path.join(local, item["path"]))
    return mapping


def remap(args, mapping, port, flag_files=True):
    """args with every mount path moved to its local dir, in flag files too,
    and --listen and --scheduler on port 7070 made 127.0.0.1:port (in the
    flag files of the mounts too, unless flag_files is False)."""
    def fix(text):
        # One pass, at the start of a value: a local dir is never remapped.
        mounts = sorted(mapping, key=len, reverse=True)
        text = re.sub(r"(^|[=\s])(" + "|".join(map(re.escape, mounts)) + ")/",
                      lambda m: m.group(1) + mapping[m.group(2)] + "/", text,
                      flags=re.M)
        text = re.sub(r"--listen=[\w.]+:7070", f"--listen=127.0.0.1:{port}",
                      text)
        return re.sub(r"--scheduler=[\w.-]+:7070",
                      f"--scheduler=127.0.0.1:{port}", text)
    for local in mapping.values() if flag_files else ():
        for name in os.listdir(local):
            if name.endswith(".flags"):
                path = os.path.join(local, name)
                with open(path) as f:
                    text = f.read()
                with open(path, "w") as f:
                    f.write(fix(text))
    return [fix(a) for a in args]


def wait_for(predicate, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def run_live(rendered, source, binaries):
    """Runs the rendered pods' commands here, their mounts laid out in a
    temporary directory with a development CA and tokens: the scheduler
    with its flag files, the probe command, and a worker that registers
    over TLS with its token and drains on SIGTERM. Returns errors."""
    errors = []
    sts = rendered.find("StatefulSet", "dial-scheduler")[0]
    dep = rendered.find("Deployment", "dial-worker")[0]
    with tempfile.TemporaryDirectory() as tmp:
        ca = os.path.join(tmp, "ca")
        subprocess.run([os.path.join(source, "deploy/dev-ca.sh"), ca,
                        "--san", "dial-scheduler"], check=True,
                       capture_output=True)
        secrets = {("dial-scheduler-tls", "tls.crt"): f"{ca}/server.crt",
                   ("dial-scheduler-tls", "tls.key"): f"{ca}/server.key",
                   ("dial-scheduler-tls", "ca.crt"): f"{ca}/ca.crt",
                   ("dial-tokens", "tokens"): f"{ca}/auth-tokens",
                   ("dial-worker-token", "token"): f"{ca}/tokens/worker.token"}
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        smap = pod_files(sts, rendered, os.path.join(tmp, "scheduler"), secrets)
        sc = sts["spec"]["template"]["spec"]["containers"][0]
        slog = open(os.path.join(tmp, "scheduler.log"), "w")
        sched = subprocess.Popen(
            [binaries["dial-scheduler"]] + remap(sc["args"], smap, port),
            stdout=slog, stderr=subprocess.STDOUT)
        worker = None
        try:
            probe = sc["readinessProbe"]["exec"]["command"]
            probe_cmd = [binaries["dialctl"]] + remap(probe[1:], smap, port,
                                                         flag_files=False)

            def healthy():
                if sched.poll() is not None:
                    return True  # exited: fails below
                r = subprocess.run(probe_cmd, capture_output=True, text=True)
                return r.returncode == 0 and "SERVING" in r.stdout
            if not wait_for(healthy, 30) or sched.poll() is not None:
                errors.append("the readiness probe never passed: " +
                              open(slog.name).read()[-2000:])
                return errors
            wmap = pod_files(dep, rendered, os.path.join(tmp, "worker"), secrets)
            wc = dep["spec"]["template"]["spec"]["containers"][0]
            env = dict(os.environ)
            env.pop("DIAL_TOKEN", None)  # the worker reads its file
            wargs = remap(wc["args"], wmap, port)
            # It checks the name it checks in the cluster (the Service's);
            # here there are no GPUs to hand out.
            service = rendered.find("Service", "dial-scheduler")[0]
            wargs += [f"--tls-server-name={service['metadata']['name']}",
                      "--gpus="]
            wlog_path = os.path.join(tmp, "worker.log")
            wlog = open(wlog_path, "w")
            worker = subprocess.Popen([binaries["dial-worker"]] + wargs,
                                      env=env, stdout=wlog,
                                      stderr=subprocess.STDOUT)
            if not wait_for(lambda: "registered as" in open(wlog_path).read(),
                            30):
                errors.append("the worker never registered: " +
                              open(wlog_path).read()[-2000:])
                return errors
            worker.send_signal(signal.SIGTERM)
            try:
                code = worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                code = None
            if code != 0:
                errors.append(f"the worker did not drain and exit 0 on "
                              f"SIGTERM ({code})")
        finally:
            for p in (worker, sched):
                if p and p.poll() is None:
                    p.kill()
                    p.wait()
    return errors


def start_postgres():
    """A PostgreSQL server from Debian in a fresh directory under /tmp, on
    a unix socket only, as the postgres user when we are root; returns its
    database URL and a function that stops it (or None, None)."""
    initdb = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not initdb:
        return None, None
    bindir = os.path.dirname(initdb[-1])
    as_pg = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    d = tempfile.mkdtemp(prefix="dial-k8s-pg-")
    if os.geteuid() == 0:
        shutil.chown(d, "postgres", "postgres")
    quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL,
             "stderr": subprocess.DEVNULL}

    def stop():
        subprocess.run(as_pg + [f"{bindir}/pg_ctl", "-D", f"{d}/data", "-w",
                                "-m", "immediate", "stop"], **quiet)
        shutil.rmtree(d, ignore_errors=True)
    try:
        subprocess.run(as_pg + [f"{bindir}/initdb", "-D", f"{d}/data", "-A",
                                "trust", "-U", "postgres", "--no-sync"],
                       check=True, **quiet)
        # The server keeps the descriptors it is given: none of ours.
        subprocess.run(as_pg + [f"{bindir}/pg_ctl", "-D", f"{d}/data", "-w",
                                "-t", "60", "-l", f"{d}/server.log", "-o",
                                f"-k {d} -c listen_addresses=''", "start"],
                       check=True, **quiet)
        subprocess.run(as_pg + [f"{bindir}/createdb", "-h", d, "-U",
                                "postgres", "dial"], check=True, **quiet)
    except subprocess.CalledProcessError:
        stop()
        raise
    return f"postgresql:///dial?host={d}&user=postgres", stop


def run_live_ha(rendered, source, binaries):
    """The ha overlay's scheduler pod run twice here on one PostgreSQL
    server: both pass the liveness probe, exactly one (the leader) the
    readiness probe; once the leader is SIGKILLed, the other passes it.
    Returns errors."""
    errors = []
    sts = rendered.find("StatefulSet", "dial-scheduler")[0]
    sc = sts["spec"]["template"]["spec"]["containers"][0]
    url, stop = start_postgres()
    if url is None:
        return ["no PostgreSQL server (apt-get install postgresql)"]
    procs, probes = [], []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            ca = os.path.join(tmp, "ca")
            subprocess.run([os.path.join(source, "deploy/dev-ca.sh"), ca,
                            "--san", "dial-scheduler"], check=True,
                           capture_output=True)
            password = os.path.join(tmp, "db-password")
            with open(password, "w") as f:
                f.write("unused: the test server trusts its socket\n")
            secrets = {("dial-scheduler-tls", "tls.crt"): f"{ca}/server.crt",
                       ("dial-scheduler-tls", "tls.key"): f"{ca}/server.key",
                       ("dial-scheduler-tls", "ca.crt"): f"{ca}/ca.crt",
                       ("dial-tokens", "tokens"): f"{ca}/auth-tokens",
                       ("dial-db", "password"): password}
            env = dict(os.environ, DIAL_DB_URL=url, POD_IP="127.0.0.1")
            for i in range(2):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", 0))
                    port = sock.getsockname()[1]
                smap = pod_files(sts, rendered,
                                 os.path.join(tmp, f"scheduler{i}"), secrets)
                # Kubernetes expands $(NAME) in args from the env.
                args = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a)
                        for a in remap(sc["args"], smap, port)]
                log = open(os.path.join(tmp, f"scheduler{i}.log"), "w")
                procs.append(subprocess.Popen(
                    [binaries["dial-scheduler"]] + args, env=env, stdout=log,
                    stderr=subprocess.STDOUT))
                probes.append({
                    kind: [binaries["dialctl"]] + remap(
                        sc[kind]["exec"]["command"][1:], smap, port,
                        flag_files=False)
                    for kind in ("readinessProbe", "livenessProbe")})

            def passes(i, kind):
                return procs[i].poll() is None and subprocess.run(
                    probes[i][kind], capture_output=True).returncode == 0

            def logs():
                return " | ".join(open(os.path.join(tmp, f"scheduler{i}.log"))
                                  .read()[-1000:] for i in range(2))
            if not wait_for(lambda: all(passes(i, "livenessProbe")
                                        for i in range(2)), 30):
                errors.append("the liveness probe did not pass on both: " +
                              logs())
                return errors
            if not wait_for(lambda: sum(passes(i, "readinessProbe")
                                        for i in range(2)) == 1, 30):
                errors.append("not exactly one scheduler was ready: " + logs())
                return errors
            leader = 0 if passes(0, "readinessProbe") else 1
            if passes(1 - leader, "readinessProbe"):
                errors.append("the standby passed the readiness probe")
            procs[leader].kill()
            if not wait_for(lambda: passes(1 - leader, "readinessProbe"), 20):
                errors.append("the standby did not become ready after the "
                              "leader was killed: " + logs())
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            stop()
    return errors


def main():
    source, scheduler, worker, dialctl = sys.argv[1:5]
    if not shutil.which("kubectl"):
        print("no kubectl: skipped")
        sys.exit(SKIP)
    binaries = {"dial-scheduler": scheduler, "dial-worker": worker,
                "dialctl": dialctl}
    flags_of = {"dial-scheduler": known_flags(scheduler),
                "dial-worker": known_flags(worker),
                "dialctl": known_flags(dialctl)}
    overlays_dir = os.path.join(source, "deploy/k8s/overlays")
    overlays = sorted(os.listdir(overlays_dir))
    assert {"cpu", "gpu", "ha"} <= set(overlays), overlays
    failures = []
    for overlay in overlays:
        out = subprocess.run(
            ["kubectl", "kustomize", os.path.join(overlays_dir, overlay)],
            capture_output=True, text=True, check=False)
        if out.returncode != 0:
            failures.append(f"{overlay}: kubectl kustomize: {out.stderr}")
            continue
        rendered = Rendered(yaml.safe_load_all(out.stdout))
        errs = check(rendered, flags_of, overlay)
        failures += errs
        print(f"{overlay}: {len(rendered.docs)} objects, "
              f"{'OK' if not errs else 'FAILED'}")

        # The checker catches what it claims to: each mutation must fail.
        def mutated(edit):
            docs = copy.deepcopy(rendered.docs)
            for d in docs:
                edit(d)
            return check(Rendered(docs), flags_of, overlay)

        def bad_flag(d):
            if d["kind"] == "Deployment":
                d["spec"]["template"]["spec"]["containers"][0]["args"].append(
                    "--no-such-flag=1")

        def bad_flagfile_line(d):
            if d["kind"] == "ConfigMap" and "scheduler.flags" in d["data"]:
                d["data"]["scheduler.flags"] += "--listen-port=7070\n"

        def bad_port(d):
            if d["kind"] == "Service":
                d["spec"]["ports"][0]["targetPort"] = 7071

        def bad_mount(d):
            if d["kind"] == "StatefulSet":
                c = d["spec"]["template"]["spec"]["containers"][0]
                c["volumeMounts"] = [m for m in c["volumeMounts"]
                                     if m["mountPath"] != "/etc/dial/tls"]

        def short_grace(d):
            if d["kind"] == "Deployment":
                d["spec"]["template"]["spec"][
                    "terminationGracePeriodSeconds"] = 30

        ha = rendered.find("StatefulSet", "dial-scheduler")[0]["spec"].get(
            "replicas") != 1
        live = (run_live_ha if ha else run_live)(rendered, source, binaries)
        failures += [f"{overlay}: live: {e}" for e in live]
        print(f"{overlay}: live run {'OK' if not live else 'FAILED'}")

        def live_is_ready(d):
            if d["kind"] == "StatefulSet":
                c = d["spec"]["template"]["spec"]["containers"][0]
                c["livenessProbe"]["exec"]["command"] = [
                    a for a in c["livenessProbe"]["exec"]["command"]
                    if not a.startswith("--service")]

        def db_url_literal(d):
            if d["kind"] == "StatefulSet":
                c = d["spec"]["template"]["spec"]["containers"][0]
                c["args"] = [a.replace("$(DIAL_DB_URL)", "postgresql://x@h/d")
                             for a in c["args"]]

        for edit in (bad_flag, bad_flagfile_line, bad_port, bad_mount,
                     short_grace) + ((live_is_ready, db_url_literal) if ha
                                     else ()):
            if not mutated(edit):
                failures.append(f"{overlay}: the check missed {edit.__name__}")
    for f in failures:
        print("FAIL:", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
