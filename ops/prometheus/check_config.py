#!/usr/bin/env python3
"""Checks ops/prometheus/scrape-kubernetes.yml against the pod templates of
ops/k8s/base (and of the example Jobs of ops/k8s/examples), and writes a
copy promtool can check.

Debian's Prometheus (2.42) is built without Kubernetes service discovery:
its promtool refuses `kubernetes_sd_configs` as an unknown field. So this
script does what that discovery and the relabelling would do, on the pods
the manifests describe:

  - every scrape job of the file discovers pods (role: pod) and keeps
    honor_labels (sluice's own `job` label must win, see scrape.yml);
  - its label selector matches the labels of exactly one pod template of
    ops/k8s/base (sluice-master's or sluice-worker's);
  - or, for the job without a selector (sluice-trainer: trainers are the
    user's pods), its relabelling keeps exactly the container ports named
    "sluice-metrics" of every pod template (ops/k8s/examples/reader-job.yaml
    declares one; there must be at least one) and sets `component` to
    trainer;
  - its relabel_configs, applied to the discovery labels of every container
    port of every pod template, keep exactly that template's port named
    "admin" (its --admin port) and set `component` to the template's
    app.kubernetes.io/component (master, worker);
  - with --promtool-copy OUT, it writes the file with each
    kubernetes_sd_configs replaced by a static target, so that
    `promtool check config OUT` checks everything else (relabel syntax,
    regexes, the rule file).

  check_config.py --k8s ops/k8s/base [--examples ops/k8s/examples]
                  --config ops/prometheus/scrape-kubernetes.yml [--promtool-copy OUT]

Exits 1 naming every problem.
"""
import argparse
import glob
import os
import re
import sys

import yaml


TRAINER_PORT = "sluice-metrics"


def pod_templates(k8s_dir):
    """(name, labels, annotations, [(container port name, port)]) of every
    Deployment/StatefulSet/Job pod template under k8s_dir."""
    out = []
    for path in sorted(glob.glob(os.path.join(k8s_dir, "*.yaml"))):
        with open(path, encoding="utf-8") as fh:
            for doc in yaml.safe_load_all(fh):
                if not doc or doc.get("kind") not in ("Deployment", "StatefulSet", "Job"):
                    continue
                tmpl = doc["spec"]["template"]
                meta = tmpl.get("metadata", {})
                ports = []
                for c in tmpl["spec"].get("containers", []):
                    for p in c.get("ports", []):
                        ports.append((p.get("name", ""), p["containerPort"]))
                out.append((doc["metadata"]["name"], meta.get("labels", {}),
                            meta.get("annotations", {}), ports))
    return out


def sanitize(name):
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def discovery_labels(name, labels, port_name, port):
    """What Prometheus' pod discovery gives a target (the subset used here)."""
    d = {
        "__address__": f"10.0.0.1:{port}",
        "__meta_kubernetes_namespace": "sluice-example",
        "__meta_kubernetes_pod_name": f"{name}-0",
        "__meta_kubernetes_pod_phase": "Running",
        "__meta_kubernetes_pod_container_port_name": port_name,
        "__meta_kubernetes_pod_container_port_number": str(port),
    }
    for k, v in labels.items():
        d["__meta_kubernetes_pod_label_" + sanitize(k)] = v
        d["__meta_kubernetes_pod_labelpresent_" + sanitize(k)] = "true"
    return d


def relabel(labels, configs):
    """Prometheus' relabelling (keep, drop, replace): the labels, or None
    when the target is dropped."""
    labels = dict(labels)
    for rc in configs:
        action = rc.get("action", "replace")
        sep = rc.get("separator", ";")
        value = sep.join(labels.get(s, "") for s in rc.get("source_labels", []))
        regex = re.compile(rc.get("regex", "(.*)"))
        m = regex.fullmatch(value)
        if action == "keep":
            if not m:
                return None
        elif action == "drop":
            if m:
                return None
        elif action == "replace":
            if m:
                repl = rc.get("replacement", "$1")
                repl = re.sub(r"\$\{?(\d+)\}?", r"\\\1", repl)
                new = m.expand(repl)
                if new == "":
                    labels.pop(rc["target_label"], None)
                else:
                    labels[rc["target_label"]] = new
        else:
            raise ValueError(f"relabel action {action!r} is not simulated here")
    return labels


def selector_matches(selector, labels):
    for term in filter(None, (t.strip() for t in selector.split(","))):
        k, _, v = term.partition("=")
        if labels.get(k) != v:
            return False
    return True


def check_trainer_job(job, where, templates):
    """The selector-less job: every pod's sluice-metrics ports, nothing else."""
    problems = []
    want = [(n, pn, p) for n, _, _, ports in templates for pn, p in ports if pn == TRAINER_PORT]
    if not want:
        return [f"{where}: no pod template under ops/k8s declares a container port named "
                f"{TRAINER_PORT}, so nothing shows what the job scrapes"]
    got = []
    for tname, tlabels, _, ports in templates:
        for port_name, port in ports:
            out = relabel(discovery_labels(tname, tlabels, port_name, port),
                          job.get("relabel_configs", []))
            if out is None:
                continue
            got.append((tname, port_name, port))
            if out.get("component") != "trainer":
                problems.append(f"{where}: target {tname}:{port} gets component="
                                f"{out.get('component')!r}, want 'trainer'")
    if got != want:
        problems.append(f"{where}: keeps ports {got}, want {want}")
    return problems


def check(k8s_dir, config_path, examples_dir=None):
    problems = []
    with open(config_path, encoding="utf-8") as fh:
        config = yaml.safe_load(fh)
    templates = pod_templates(k8s_dir)
    examples = pod_templates(examples_dir) if examples_dir else []
    if not templates:
        return [f"{k8s_dir}: no Deployment or StatefulSet pod template"]
    covered = set()
    for job in config.get("scrape_configs", []):
        name = job.get("job_name", "?")
        where = f"{config_path}: scrape job {name}"
        if job.get("honor_labels") is not True:
            problems.append(f"{where}: honor_labels must be true (sluice's job label)")
        sds = job.get("kubernetes_sd_configs", [])
        if len(sds) != 1 or sds[0].get("role") != "pod":
            problems.append(f"{where}: wants one kubernetes_sd_configs entry with role pod")
            continue
        selectors = [s["label"] for s in sds[0].get("selectors", []) if s.get("role") == "pod"]
        if not selectors:
            problems += check_trainer_job(job, where, templates + examples)
            continue
        chosen = [t for t in templates
                  if all(selector_matches(s, t[1]) for s in selectors)]
        if len(chosen) != 1:
            problems.append(f"{where}: its pod selector {selectors} matches "
                            f"{[t[0] for t in chosen]} of ops/k8s, not exactly one pod template")
            continue
        want_name, want_labels, _, _ = chosen[0]
        component = want_labels.get("app.kubernetes.io/component", "")
        kept = []
        for tname, tlabels, _, ports in templates:
            for port_name, port in ports:
                out = relabel(discovery_labels(tname, tlabels, port_name, port),
                              job.get("relabel_configs", []))
                if out is not None:
                    kept.append((tname, port_name, port, out))
        admin = [(n, pn, p) for n, _, _, ports in [chosen[0]] for pn, p in ports if pn == "admin"]
        if not admin:
            problems.append(f"{where}: pod template {want_name} has no container port named admin")
        got = [(n, pn, p) for n, pn, p, _ in kept]
        # The job's selector narrows discovery to its pods; relabelling must
        # keep that template's admin port, and only it.
        got_here = [g for g in got if g[0] == want_name]
        if got_here != admin:
            problems.append(f"{where}: keeps ports {got_here} of {want_name}, want {admin}")
        for n, pn, p, out in kept:
            if n == want_name and out.get("component") != component:
                problems.append(f"{where}: target {n}:{p} gets component="
                                f"{out.get('component')!r}, want {component!r}")
        covered.add(want_name)
    missing = sorted({t[0] for t in templates if any(pn == "admin" for pn, _ in t[3])} - covered)
    if missing:
        problems.append(f"{config_path}: no scrape job for {missing} of ops/k8s")
    return problems


def promtool_copy(config_path, out_path):
    with open(config_path, encoding="utf-8") as fh:
        config = yaml.safe_load(fh)
    for job in config.get("scrape_configs", []):
        if job.pop("kubernetes_sd_configs", None) is not None:
            job["static_configs"] = [{"targets": ["127.0.0.1:1"]}]
    with open(out_path, "w", encoding="utf-8") as fh:
        yaml.safe_dump(config, fh, sort_keys=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--k8s", required=True, help="ops/k8s/base")
    ap.add_argument("--examples", help="ops/k8s/examples (the trainer job's pods)")
    ap.add_argument("--config", required=True, help="scrape-kubernetes.yml")
    ap.add_argument("--promtool-copy", help="write the promtool-checkable copy here")
    a = ap.parse_args()
    try:
        problems = check(a.k8s, a.config, a.examples)
    except (OSError, yaml.YAMLError, KeyError, ValueError, re.error) as e:
        problems = [f"{a.config}: {e}"]
    for p in problems:
        print(f"check_config: {p}", file=sys.stderr)
    if problems:
        return 1
    if a.promtool_copy:
        promtool_copy(a.config, a.promtool_copy)
    print(f"check_config: {a.config}: every sluice pod's admin port and every trainer's "
          f"{TRAINER_PORT} port is scraped, with its component")
    return 0


if __name__ == "__main__":
    sys.exit(main())
