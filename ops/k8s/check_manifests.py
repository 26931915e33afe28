#!/usr/bin/env python3
"""What the Kubernetes schemas cannot see in sluice's manifests: that the
pieces fit each other and the program. Run by ops/k8s/check on the output
of `kustomize build` (ctest k8s_manifests), with the Python of
ops/k8s-tools (it needs PyYAML).

  check_manifests.py --sluice BIN [--base] [--image-tag T] [--context F]... BUILD.yaml...

Each file's objects are checked together (plus --context files' objects,
which are only looked up: the base build for the example Jobs). Checked:
  - every `sluice` command line against `sluice ... --help` (ops/cliflags.py);
  - every $(VAR) in an argument is an env var of its container (Kubernetes
    passes an unknown one through verbatim); volume mounts name volumes;
    probes name declared ports, liveness /healthz, readiness /readyz, on the
    port of --admin;
  - pods run as non-root, no privilege escalation, read-only root, no
    capabilities; secrets come from the Secret sluice-secrets (its keys:
    cluster-secret, admin-token) and every file flag points into a mounted
    key; claims exist;
  - the master: a StatefulSet of one replica, --state on its claim template,
    a Service for its control and admin ports; with --executor kubernetes,
    --k8s-deployment names a Deployment of workers here, --k8s-namespace is
    the pod's namespace, and its ServiceAccount is bound to exactly get and
    patch of that Deployment's scale;
  - workers: a Deployment (no replicas in the base: the master owns them;
    a rollout that can go on while no worker is ready), worker id = pod name, --listen on the pod IP, --master a Service port
    leading to the master's control port, memory request = limit >=
    --memory-limit + max(256 MiB, a quarter of it), CPU request >= threads
    + 1, a PodDisruptionBudget selecting them;
  - the autocache: a worker's --cache-dir on an emptyDir of the node's disk
    whose sizeLimit holds --cache-size and a quarter more, and ephemeral-
    storage requested for its emptyDirs; the master's --cache-dir on a
    writable volume, and, where workers read tables by path from a claim,
    on that claim where the workers mount it writable at the same path;
    with --base, both set;
  - one image for every sluice container (with --image-tag, that tag).
Exit 0 when all hold, 1 listing every problem.
"""
import argparse
import os
import re
import sys

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import cliflags  # noqa: E402

SECRET = "sluice-secrets"
SECRET_KEYS = {"cluster-secret", "admin-token"}
FILE_FLAGS = ("--token-file", "--cluster-secret-file", "--tls-cert", "--tls-key")
MIB = cliflags.MIB


def quantity_bytes(q):
    """Kubernetes memory quantity -> bytes."""
    m = re.fullmatch(r"([0-9.]+)([KMGTPE]i?|k)?", str(q))
    if not m:
        raise ValueError(f"memory quantity {q!r}")
    mul = {None: 1, "k": 1000, "K": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4,
           "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}[m.group(2)]
    return int(float(m.group(1)) * mul)


def quantity_cpu(q):
    s = str(q)
    return float(s[:-1]) / 1000 if s.endswith("m") else float(s)


def flags(args):
    """{--flag: value} of a command line (--f=v or --f v)."""
    out, i = {}, 0
    while i < len(args):
        a = args[i]
        i += 1
        if a.startswith("--"):
            k, eq, v = a.partition("=")
            if not eq and i < len(args) and not args[i].startswith("--"):
                v = args[i]
                i += 1
            out[k] = v if (eq or v) else True
    return out


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


class Check:
    def __init__(self, path, docs, context, sluice, base, image_tag):
        self.path, self.sluice, self.base, self.image_tag = path, sluice, base, image_tag
        self.objs = [d for d in docs if isinstance(d, dict)]
        self.lookup = self.objs + [d for d in context if isinstance(d, dict)]
        self.errors, self.notes, self.checked = [], [], 0

    def err(self, obj, msg):
        self.errors.append(f"{self.path}: {obj['kind']}/{obj['metadata']['name']}: {msg}")

    def find(self, kind, name=None):
        return [o for o in self.lookup if o.get("kind") == kind
                and (name is None or o["metadata"]["name"] == name)]

    def pods(self):
        for o in self.objs:
            spec = o.get("spec", {})
            if o["kind"] in ("Deployment", "StatefulSet", "Job"):
                yield o, spec["template"]
            elif o["kind"] == "CronJob":
                yield o, spec["jobTemplate"]["spec"]["template"]

    # ---- every pod ------------------------------------------------------------
    def pod(self, obj, tmpl):
        spec = tmpl["spec"]
        psc = spec.get("securityContext", {})
        if psc.get("runAsNonRoot") is not True:
            self.err(obj, "pod securityContext.runAsNonRoot is not true")
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        claim_templates = {t["metadata"]["name"] for t in obj["spec"].get("volumeClaimTemplates", [])}
        for v in volumes.values():
            if "secret" in v:
                s = v["secret"]
                if s.get("secretName") != SECRET:
                    self.err(obj, f"volume {v['name']}: secret {s.get('secretName')!r}, not {SECRET}")
                bad = {i["key"] for i in s.get("items", [])} - SECRET_KEYS
                if bad:
                    self.err(obj, f"volume {v['name']}: keys {sorted(bad)} are not in {SECRET}")
            if "persistentVolumeClaim" in v:
                claim = v["persistentVolumeClaim"]["claimName"]
                if not self.find("PersistentVolumeClaim", claim):
                    self.err(obj, f"volume {v['name']}: no PersistentVolumeClaim {claim}")
        for c in spec["containers"]:
            self.container(obj, tmpl, c, volumes, claim_templates)

    def container(self, obj, tmpl, c, volumes, claim_templates):
        where = f"container {c['name']}"
        sc = c.get("securityContext", {})
        if sc.get("allowPrivilegeEscalation") is not False:
            self.err(obj, f"{where}: allowPrivilegeEscalation is not false")
        if sc.get("readOnlyRootFilesystem") is not True:
            self.err(obj, f"{where}: readOnlyRootFilesystem is not true")
        if "ALL" not in sc.get("capabilities", {}).get("drop", []):
            self.err(obj, f"{where}: capabilities.drop lacks ALL")
        env = {e["name"]: e for e in c.get("env", [])}
        args = [str(a) for a in c.get("command", []) + c.get("args", [])]
        for a in args:
            for var in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", a):
                if var not in env:
                    self.err(obj, f"{where}: {a!r} names $({var}), which is not in its env")
        # The object store's settings (ops/k8s/base/s3.yaml): a ConfigMap
        # named in envFrom must be here (else the pod never starts); a
        # Secret there must be optional (none is in git: IRSA needs none).
        for ef in c.get("envFrom", []):
            if "configMapRef" in ef:
                cm = ef["configMapRef"]["name"]
                if not ef["configMapRef"].get("optional") and not self.find("ConfigMap", cm):
                    self.err(obj, f"{where}: envFrom names ConfigMap {cm!r}, which is not here")
            if "secretRef" in ef and ef["secretRef"].get("optional") is not True:
                self.err(obj, f"{where}: envFrom names Secret {ef['secretRef']['name']!r} without "
                              "optional: true (credentials may come from IRSA instead)")
        sa = tmpl["spec"].get("serviceAccountName")
        if sa and not self.find("ServiceAccount", sa):
            self.err(obj, f"serviceAccountName {sa!r}: no such ServiceAccount here")
        mounts = {}
        for m in c.get("volumeMounts", []):
            if m["name"] not in volumes and m["name"] not in claim_templates:
                self.err(obj, f"{where}: mount {m['mountPath']} names no volume {m['name']!r}")
            mounts[m["mountPath"].rstrip("/")] = m
        ports = {p["name"]: p["containerPort"] for p in c.get("ports", []) if "name" in p}
        if "sluice" not in c["image"] or c.get("command"):
            return
        # ---- a sluice container: its entrypoint is the program -------------------
        self.checked += 1
        errors, notes = cliflags.check(self.sluice, args)
        for e in errors:
            self.err(obj, f"{where}: {e}")
        self.notes.extend(f"{self.path}: {obj['kind']}/{obj['metadata']['name']}: {n}" for n in notes)
        f = flags(args)
        resolved = {k: self.resolve(v, env) for k, v in f.items() if isinstance(v, str)}

        def mount_of(path):
            best = None
            for mp, m in mounts.items():
                if path == mp or path.startswith(mp + "/"):
                    if best is None or len(mp) > len(best[0]):
                        best = (mp, m)
            return best

        for flag in FILE_FLAGS:
            if flag not in f:
                continue
            path = f[flag]
            found = mount_of(path)
            vol = volumes.get(found[1]["name"]) if found else None
            if not vol or "secret" not in vol:
                self.err(obj, f"{where}: {flag}={path} is not in a mounted secret")
                continue
            rel = path[len(found[0]) + 1:]
            items = vol["secret"].get("items")
            names = {i["path"] for i in items} if items else SECRET_KEYS
            if rel not in names:
                self.err(obj, f"{where}: {flag}={path}: the secret volume holds {sorted(names)}")
            if not found[1].get("readOnly"):
                self.err(obj, f"{where}: the secret mount {found[0]} is not readOnly")

        def probe(kind, path):
            p = c.get(kind)
            if not p:
                self.err(obj, f"{where}: no {kind}")
                return None
            g = p.get("httpGet", {})
            port = g.get("port")
            if isinstance(port, str):
                if port not in ports:
                    self.err(obj, f"{where}: {kind} port {port!r} is not a port of the container")
                    return None
                port = ports[port]
            if g.get("path") != path:
                self.err(obj, f"{where}: {kind} asks {g.get('path')!r}, not {path}")
            return port

        sub = args[0] if args else ""
        if sub in ("master", "worker"):
            admin_port = self.port_of(resolved.get("--admin"))
            for kind, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
                port = probe(kind, path)
                if port is not None and port != admin_port:
                    self.err(obj, f"{where}: {kind} probes port {port}, --admin is on {admin_port}")
            if "startupProbe" in c and probe("startupProbe", "/healthz") != admin_port:
                self.err(obj, f"{where}: startupProbe is not on the --admin port")
            listen_port = self.port_of(resolved.get("--listen"))
            if listen_port not in ports.values():
                self.err(obj, f"{where}: --listen port {listen_port} is not a containerPort")
        if sub == "master":
            self.master(obj, tmpl, c, f, env, mount_of, claim_templates, ports)
            self.master_cache(obj, f, mount_of, volumes, claim_templates)
        elif sub == "worker":
            self.worker(obj, tmpl, c, f, env, resolved)
            self.worker_cache(obj, c, resolved, mount_of, volumes)
        if self.image_tag and c["image"].rsplit(":", 1)[-1] != self.image_tag:
            self.err(obj, f"{where}: image {c['image']}, not tag {self.image_tag} (the CMake project version)")

    @staticmethod
    def resolve(v, env):
        """$(VAR) -> the env var's literal value, when it has one."""
        def sub(m):
            e = env.get(m.group(1), {})
            return str(e["value"]) if "value" in e else m.group(0)
        return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", sub, v)

    @staticmethod
    def port_of(addr):
        if not addr or ":" not in addr:
            return None
        try:
            return int(addr.rsplit(":", 1)[1])
        except ValueError:
            return None

    @staticmethod
    def field_ref(env, var):
        return env.get(var, {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")

    # ---- the master -------------------------------------------------------------
    def master(self, obj, tmpl, c, f, env, mount_of, claim_templates, ports):
        if obj["kind"] != "StatefulSet":
            self.err(obj, "the master is not a StatefulSet")
        elif obj["spec"].get("replicas") != 1:
            self.err(obj, f"the master has replicas {obj['spec'].get('replicas')}, not 1")
        state = f.get("--state")
        found = mount_of(state) if isinstance(state, str) else None
        if not found or found[1]["name"] not in claim_templates:
            self.err(obj, f"--state={state} is not on a volumeClaimTemplate (it would not survive the pod)")
        labels = tmpl["metadata"].get("labels", {})
        svcs = [s for s in self.find("Service") if selects(s["spec"].get("selector"), labels)]
        exposed = set()
        for s in svcs:
            for p in s["spec"]["ports"]:
                t = p.get("targetPort", p["port"])
                exposed.add(ports.get(t, t))
        for flag in ("--listen", "--admin"):
            if self.port_of(f.get(flag)) not in exposed:
                self.err(obj, f"no Service exposes the master's {flag} port {self.port_of(f.get(flag))}")
        if f.get("--executor") != "kubernetes":
            return
        name = f.get("--k8s-deployment")
        deps = [d for d in self.find("Deployment", name)
                if any(str(a) == "worker" for x in d["spec"]["template"]["spec"]["containers"]
                       for a in x.get("args", [])[:1])]
        if not deps:
            self.err(obj, f"--k8s-deployment={name}: no Deployment of sluice workers of that name here")
        ns = f.get("--k8s-namespace")
        var = re.fullmatch(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", ns or "")
        build_ns = obj["metadata"].get("namespace")
        if var:
            if self.field_ref(env, var.group(1)) != "metadata.namespace":
                self.err(obj, f"--k8s-namespace={ns}: $({var.group(1)}) is not the pod's metadata.namespace")
        elif ns != build_ns:
            self.err(obj, f"--k8s-namespace={ns}, but the objects are in {build_ns!r}")
        spec = tmpl["spec"]
        sa = spec.get("serviceAccountName")
        if not sa or not self.find("ServiceAccount", sa):
            self.err(obj, f"serviceAccountName {sa!r}: no such ServiceAccount here")
        if spec.get("automountServiceAccountToken") is not True:
            self.err(obj, "the master's pod does not mount its ServiceAccount token")
        for crb in self.find("ClusterRoleBinding"):
            if any(s.get("kind") == "ServiceAccount" and s["name"] == sa for s in crb.get("subjects", [])):
                self.err(obj, f"ClusterRoleBinding {crb['metadata']['name']} grants {sa} cluster-wide rights")
        rules = []
        for rb in self.find("RoleBinding"):
            if any(s.get("kind") == "ServiceAccount" and s["name"] == sa for s in rb.get("subjects", [])):
                ref = rb["roleRef"]
                roles = self.find(ref["kind"], ref["name"])
                if not roles:
                    self.err(obj, f"RoleBinding {rb['metadata']['name']}: no {ref['kind']} {ref['name']}")
                for r in roles:
                    rules.extend(r.get("rules", []))
        want = [{"apiGroups": ["apps"], "resources": ["deployments/scale"],
                 "resourceNames": [name], "verbs": ["get", "patch"]}]
        norm = [{k: sorted(v) for k, v in r.items()} for r in rules]
        if norm != want:
            self.err(obj, f"{sa} may {norm}; it needs exactly {want}")

    # ---- workers ----------------------------------------------------------------
    def worker(self, obj, tmpl, c, f, env, resolved):
        if obj["kind"] != "Deployment":
            self.err(obj, "workers are not a Deployment")
        elif self.base and "replicas" in obj["spec"]:
            self.err(obj, "the base names replicas: every `kubectl apply` would undo the master's scaling")
        if str(obj["spec"].get("strategy", {}).get("rollingUpdate", {}).get("maxUnavailable", "25%")) in ("0", "0%"):
            self.err(obj, "rollingUpdate.maxUnavailable 0: a worker is ready only while it holds a lease, "
                          "so a rollout with no job running would wait forever")
        if f.get("--worker-id") != "$(POD_NAME)" or self.field_ref(env, "POD_NAME") != "metadata.name":
            self.err(obj, "--worker-id is not $(POD_NAME) from metadata.name (a stable, unique id per pod)")
        host = (f.get("--listen") or "").rsplit(":", 1)[0]
        if host != "$(POD_IP)" or self.field_ref(env, "POD_IP") != "status.podIP":
            self.err(obj, f"--listen={f.get('--listen')}: trainers dial the address registered, "
                          "which must be the pod IP ($(POD_IP) from status.podIP)")
        master = f.get("--master") or ""
        mhost, _, mport = master.rpartition(":")
        svc = self.find("Service", mhost.split(".")[0])
        masters = [t for o, t in self.pods() if any(
            x.get("args", [""])[:1] == ["master"] for x in t["spec"]["containers"])]
        ok = False
        for s in svc:
            for p in s["spec"]["ports"]:
                if str(p["port"]) != mport:
                    continue
                for t in masters:
                    if not selects(s["spec"].get("selector"), t["metadata"].get("labels", {})):
                        continue
                    for x in t["spec"]["containers"]:
                        cports = {q["name"]: q["containerPort"] for q in x.get("ports", []) if "name" in q}
                        target = cports.get(p.get("targetPort"), p.get("targetPort", p["port"]))
                        ok = ok or target == self.port_of(flags(x.get("args", [])).get("--listen"))
        if not ok:
            self.err(obj, f"--master={master}: no Service port here leads to the master's --listen port")
        res = c.get("resources", {})
        req, lim = res.get("requests", {}), res.get("limits", {})
        try:
            budget = cliflags.sluice_bytes(resolved.get("--memory-limit", "256M"))
            mem_req, mem_lim = quantity_bytes(req.get("memory", "0")), quantity_bytes(lim.get("memory", "0"))
        except ValueError as e:
            self.err(obj, f"memory: {e}")
            return
        need = cliflags.worker_memory_floor(budget)
        if mem_req != mem_lim:
            self.err(obj, f"memory request {req.get('memory')} is not its limit {lim.get('memory')}")
        if mem_lim < need:
            self.err(obj, f"memory limit {lim.get('memory')} < --memory-limit {budget // MIB} MiB + "
                          f"max(256 MiB, a quarter): {need // MIB} MiB")
        threads = resolved.get("--threads")
        if not threads or not threads.isdigit():
            self.err(obj, f"--threads={threads}: give a number (a container sees every core of its node)")
        elif quantity_cpu(req.get("cpu", "0")) < int(threads) + 1:
            self.err(obj, f"cpu request {req.get('cpu')} < --threads {threads} + 1 (the reader thread)")
        labels = tmpl["metadata"].get("labels", {})
        if not any(selects(p["spec"].get("selector", {}).get("matchLabels"), labels)
                   for p in self.find("PodDisruptionBudget")):
            self.err(obj, "no PodDisruptionBudget selects the workers")

    # ---- the autocache ------------------------------------------------------------
    def worker_cache(self, obj, c, resolved, mount_of, volumes):
        d = resolved.get("--cache-dir")
        if not isinstance(d, str):
            if self.base:
                self.err(obj, "the workers have no --cache-dir: a job on an object store's table "
                              "would be computed every epoch")
            return
        found = mount_of(d)
        vol = volumes.get(found[1]["name"]) if found else None
        if not vol or "emptyDir" not in vol:
            self.err(obj, f"--cache-dir={d} is not on an emptyDir volume (the node's own disk, gone "
                          "with the pod)")
            return
        if found[1].get("readOnly"):
            self.err(obj, f"--cache-dir={d}: its mount {found[0]} is readOnly")
        ed = vol["emptyDir"] or {}
        if ed.get("medium") == "Memory":
            self.err(obj, f"--cache-dir={d}: volume {vol['name']} is in memory (counted in the "
                          "container's memory limit), not on the node's disk")
        try:
            size = cliflags.sluice_bytes(resolved.get("--cache-size", "8G"))
            if "sizeLimit" not in ed:
                self.err(obj, f"--cache-dir={d}: volume {vol['name']} has no sizeLimit (the cache "
                              "would share the node's disk unbounded)")
                return
            limit = quantity_bytes(ed["sizeLimit"])
            if limit < size + size // 4:
                self.err(obj, f"--cache-size {size // MIB} MiB + a quarter (files being written) > "
                              f"volume {vol['name']} sizeLimit {ed['sizeLimit']}: past it the pod is "
                              "evicted")
            disk = sum(quantity_bytes((v["emptyDir"] or {}).get("sizeLimit", "0"))
                       for v in volumes.values() if "emptyDir" in v
                       and (v["emptyDir"] or {}).get("medium") != "Memory")
            want = quantity_bytes(c.get("resources", {}).get("requests", {})
                                  .get("ephemeral-storage", "0"))
        except ValueError as e:
            self.err(obj, f"cache: {e}")
            return
        if want < disk:
            self.err(obj, f"ephemeral-storage request {want // MIB} MiB < its emptyDirs' sizeLimits "
                          f"{disk // MIB} MiB: the scheduler would not leave room for a full cache")

    def master_cache(self, obj, f, mount_of, volumes, claim_templates):
        d = f.get("--cache-dir")
        if not isinstance(d, str) or d == "none":
            if self.base:
                self.err(obj, "the master has no --cache-dir: no autocache")
            return
        found = mount_of(d)
        if not found or (found[1]["name"] not in volumes and found[1]["name"] not in claim_templates):
            self.err(obj, f"--cache-dir={d} is not on a volume (the root file system is read-only)")
            return
        if found[1].get("readOnly"):
            self.err(obj, f"--cache-dir={d}: its mount {found[0]} is readOnly")
        # A job on a table by path keeps its files in this directory, and
        # the workers write and read them at the same path: where workers
        # mount a claim (tables by path), the directory must be on a claim
        # they mount there too, writable.
        vol = volumes.get(found[1]["name"], {})
        claim = vol.get("persistentVolumeClaim", {}).get("claimName")
        for wobj, wt in self.pods():
            for x in wt["spec"]["containers"]:
                if x.get("args", [""])[:1] != ["worker"]:
                    continue
                wvols = {v["name"]: v for v in wt["spec"].get("volumes", [])}
                wclaims = {v["persistentVolumeClaim"]["claimName"]: v["name"] for v in wvols.values()
                           if "persistentVolumeClaim" in v}
                if not wclaims:
                    continue
                ok = claim in wclaims and any(
                    m["name"] == wclaims[claim] and m["mountPath"].rstrip("/") == found[0]
                    and not m.get("readOnly") and not wvols[m["name"]]["persistentVolumeClaim"].get("readOnly")
                    for m in x.get("volumeMounts", []))
                if not ok:
                    self.err(obj, f"--cache-dir={d} is not where {wobj['metadata']['name']} sees it "
                                  f"(writable, at {found[0]}), and they read tables by path from claim "
                                  f"{sorted(wclaims)}: a job on those would name cache files the workers "
                                  "cannot write")

    # ---- services ---------------------------------------------------------------
    def services(self):
        for s in [o for o in self.objs if o["kind"] == "Service"]:
            sel = s["spec"].get("selector")
            targets = [(o, t) for o, t in self.pods() if selects(sel, t["metadata"].get("labels", {}))]
            if len(targets) != 1:
                self.err(s, f"selector {sel} matches {len(targets)} workloads, not 1")
                continue
            names = {p["name"] for x in targets[0][1]["spec"]["containers"] for p in x.get("ports", [])}
            for p in s["spec"]["ports"]:
                t = p.get("targetPort")
                if isinstance(t, str) and t not in names:
                    self.err(s, f"port {p.get('name')}: targetPort {t!r} is no port of {targets[0][0]['metadata']['name']}")
        for p in [o for o in self.objs if o["kind"] == "PodDisruptionBudget"]:
            sel = p["spec"].get("selector", {}).get("matchLabels")
            if not any(selects(sel, t["metadata"].get("labels", {})) for _, t in self.pods()):
                self.err(p, f"selector {sel} matches no pods here")

    def run(self):
        images = set()
        for obj, tmpl in self.pods():
            self.pod(obj, tmpl)
            images |= {x["image"] for x in tmpl["spec"]["containers"] if "sluice" in x["image"]}
        if len(images) > 1:
            self.errors.append(f"{self.path}: the sluice containers use different images: {sorted(images)}")
        self.services()
        return self


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sluice", required=True, help="the sluice program (its --help is the reference)")
    ap.add_argument("--base", action="store_true", help="the files are a build of ops/k8s/base")
    ap.add_argument("--image-tag", help="the tag every sluice image must have")
    ap.add_argument("--context", action="append", default=[], help="objects only looked up")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    context = []
    for p in a.context:
        with open(p) as fh:
            context.extend(yaml.safe_load_all(fh))
    errors, notes, checked = [], [], 0
    for p in a.files:
        with open(p) as fh:
            docs = list(yaml.safe_load_all(fh))
        try:
            c = Check(p, docs, context, a.sluice, a.base, a.image_tag).run()
        except RuntimeError as e:
            print(f"error: {p}: {e}")
            return 1
        errors += c.errors
        notes += c.notes
        checked += c.checked
    for n in sorted(set(notes)):
        print(f"note: {n}")
    for e in errors:
        print(f"error: {e}")
    if errors:
        return 1
    if checked == 0:
        print("error: no sluice container found")
        return 1
    print(f"check_manifests: {len(a.files)} file(s), {checked} sluice container(s): every check holds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
