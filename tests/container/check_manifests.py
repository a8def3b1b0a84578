"""deploy/k8s without a cluster: every file parses (python3-yaml), has the
fields its kind requires, and the objects agree with each other and with
sandboxd's flags. No schema validator (kubeconform, kubectl with a server) is
available here, so this checks what a typo would break and a schema would
not see either: selectors that select nothing, ports that do not exist, a
grace period shorter than the longest call, a capability list that differs
from the one the test ran with.

Run: python3 -m pytest tests/container/check_manifests.py [--bin-dir DIR]
(ctest: container_manifests; no root, a second). Every flag in the
Deployment's args must be one that DIR/sandboxd --help lists (DIR: the
build's bin directory, tests/conftest.py), except --http-listen while it is
not there. One test, soft checks (the check fixture): every failed check is
listed at its end.
"""
import os
import subprocess

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
K8S = os.path.join(REPO, "deploy", "k8s")

REQUIRED = {
    "Namespace": ["metadata.name"],
    "Deployment": ["metadata.name", "spec.selector.matchLabels", "spec.template.metadata.labels",
                   "spec.template.spec.containers"],
    "Service": ["metadata.name", "spec.selector", "spec.ports"],
    "PodDisruptionBudget": ["metadata.name", "spec.selector.matchLabels"],
    "HorizontalPodAutoscaler": ["metadata.name", "spec.scaleTargetRef", "spec.maxReplicas",
                                "spec.metrics"],
    "NetworkPolicy": ["metadata.name", "spec.podSelector", "spec.policyTypes"],
    "Kustomization": ["resources"],
}
API = {"Namespace": "v1", "Deployment": "apps/v1", "Service": "v1",
       "PodDisruptionBudget": "policy/v1", "HorizontalPodAutoscaler": "autoscaling/v2",
       "NetworkPolicy": "networking.k8s.io/v1",
       "Kustomization": "kustomize.config.k8s.io/v1beta1"}


def get(obj, path):
    for key in path.split("."):
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def arg_value(args, flag, default):
    return int(args[args.index(flag) + 1]) if flag in args else default


def test_manifests(pytestconfig, check):
    bin_dir = pytestconfig.getoption("--bin-dir")

    objs = {}
    files = sorted(f for f in os.listdir(K8S) if f.endswith(".yaml"))
    for name in files:
        with open(os.path.join(K8S, name)) as f:
            try:
                docs = [d for d in yaml.safe_load_all(f) if d is not None]
            except yaml.YAMLError as e:
                check(False, f"{name} parses", e)
                continue
        for d in docs:
            kind = d.get("kind")
            if not check(kind in REQUIRED, f"{name}: a known kind ({kind})"):
                continue
            check(d.get("apiVersion") == API[kind], f"{name}: apiVersion {API[kind]}",
                  d.get("apiVersion"))
            for path in REQUIRED[kind]:
                check(get(d, path) is not None, f"{name}: {kind} has {path}")
            if kind not in ("Namespace", "Kustomization"):
                check(get(d, "metadata.namespace") == "sandboxd",
                      f"{name}: in namespace sandboxd", get(d, "metadata.namespace"))
            objs[kind] = d

    kust = objs.get("Kustomization", {})
    check(sorted(kust.get("resources", [])) == sorted(f for f in files
                                                       if f != "kustomization.yaml"),
          "kustomization.yaml lists every manifest", kust.get("resources"))

    dep = objs["Deployment"]
    pod = dep["spec"]["template"]
    labels = pod["metadata"]["labels"]
    check(selects(dep["spec"]["selector"]["matchLabels"], labels),
          "Deployment: its selector matches its pod template's labels")
    c = pod["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    check(ports == {"rpc": 7878, "http": 9090}, "Deployment: ports rpc 7878 and http 9090",
          ports)
    args = c["args"]
    check(args[args.index("--listen") + 1] == "tcp://0.0.0.0:7878",
          "Deployment: sandboxd listens on 0.0.0.0:7878")
    check(args[args.index("--http-listen") + 1] == "http://0.0.0.0:9090",
          "Deployment: the HTTP listener on 0.0.0.0:9090")
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        g = get(c, f"{probe}.httpGet") or {}
        check(g.get("path") == path and g.get("port") in ("http", 9090),
              f"Deployment: {probe} is HTTP {path} on the http port", g)
        # The listener answers 421 to a Host it does not know; a probe with
        # neither sends the pod's IP, an address of the pod's own.
        headers = [h.get("name", "").lower() for h in g.get("httpHeaders", [])]
        check("host" not in g and "host" not in headers,
              f"Deployment: {probe} sets no host (the kubelet sends POD_IP:PORT as Host)", g)
    allowed = args[args.index("--http-allowed-hosts") + 1].split(",") \
        if "--http-allowed-hosts" in args else []
    svc_names = [f"{objs['Service']['metadata']['name']}.{objs['Service']['metadata']['namespace']}"
                 + suffix for suffix in (".svc", ".svc.cluster.local", "")]
    check(all(n in allowed for n in svc_names),
          "Deployment: --http-allowed-hosts names the Service, as a client dialing it sends Host",
          (allowed, svc_names))
    sc = c["securityContext"]
    caps = sc["capabilities"]
    check(caps.get("drop") == ["ALL"] and len(caps.get("add", [])) == 10
          and "SYS_ADMIN" in caps["add"] and "KILL" in caps["add"],
          "Deployment: all capabilities dropped, the engine's ten added", caps)
    check(sc.get("seccompProfile", {}).get("type") == "Unconfined"
          and pod["metadata"]["annotations"].get(
              "container.seccomp.security.alpha.kubernetes.io/" + c["name"]) == "unconfined",
          "Deployment: seccomp Unconfined as a field and as podman's annotation")
    check(pod["metadata"]["annotations"].get(
        "container.apparmor.security.beta.kubernetes.io/" + c["name"]) == "unconfined"
        and sc.get("appArmorProfile", {}).get("type") == "Unconfined",
        "Deployment: AppArmor unconfined (field and annotation)")
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    state = args[args.index("--state-dir") + 1]
    vols = {v["name"]: v for v in pod["spec"]["volumes"]}
    check(state in mounts and "emptyDir" in vols.get(mounts.get(state), {}),
          "Deployment: the state dir is an emptyDir volume")

    # The grace period must cover the longest call a worker can be in.
    longest_s = (arg_value(args, "--pip-timeout-ms", 300000)
                 + arg_value(args, "--max-timeout-ms", 60000)
                 + arg_value(args, "--download-timeout-ms", 10000)) / 1000
    grace = pod["spec"]["terminationGracePeriodSeconds"]
    check(grace >= longest_s + 10,
          f"Deployment: grace period {grace} s covers the longest call ({longest_s:.0f} s) "
          "plus 10 s", grace)

    # Memory: the limit must hold sandboxd and every worker at its cap.
    def mib(q):
        units = {"Mi": 1, "Gi": 1024}
        return int(q[:-2]) * units[q[-2:]]
    workers = arg_value(args, "--workers", 0)
    per_run = arg_value(args, "--max-memory-bytes", 1 << 30) >> 20
    build = (arg_value(args, "--pip-memory-bytes", 1 << 30)
             + arg_value(args, "--pip-disk-bytes", 1 << 30)) >> 20
    limit = mib(c["resources"]["limits"]["memory"])
    request = mib(c["resources"]["requests"]["memory"])
    check(workers == 2 and limit >= 32 + workers * max(per_run, build),
          f"Deployment: memory limit {limit} MiB >= sandboxd 32 + {workers} x "
          f"{max(per_run, build)} MiB", (workers, per_run, build))
    check(request >= 32 + workers * 128, f"Deployment: memory request {request} MiB >= "
          f"sandboxd 32 + {workers} runs at the default 128 MiB")
    check(c["resources"]["requests"]["cpu"] == str(workers),
          "Deployment: one CPU requested per worker")

    svc = objs["Service"]
    check(svc["spec"].get("clusterIP") == "None", "Service: headless (clusterIP: None)")
    check(selects(svc["spec"]["selector"], labels), "Service: selects the Deployment's pods")
    check(sorted((p["name"], p["port"], p["targetPort"]) for p in svc["spec"]["ports"])
          == [("http", 9090, "http"), ("rpc", 7878, "rpc")],
          "Service: ports rpc and http, targeting the named container ports")

    pdb = objs["PodDisruptionBudget"]
    check(selects(pdb["spec"]["selector"]["matchLabels"], labels),
          "PodDisruptionBudget: selects the Deployment's pods")
    check(pdb["spec"].get("maxUnavailable") == 1, "PodDisruptionBudget: one pod at a time")

    hpa = objs["HorizontalPodAutoscaler"]
    ref = hpa["spec"]["scaleTargetRef"]
    check(ref.get("kind") == "Deployment" and ref.get("name") == dep["metadata"]["name"],
          "HPA: scales the Deployment", ref)
    check(any(get(m, "resource.name") == "cpu" for m in hpa["spec"]["metrics"]),
          "HPA: on CPU")
    check(hpa["spec"].get("minReplicas", 1) >= 2, "HPA: at least two pods (the PDB's one)")

    np_ = objs["NetworkPolicy"]
    check(selects(np_["spec"]["podSelector"]["matchLabels"], labels),
          "NetworkPolicy: selects the Deployment's pods")
    check(np_["spec"]["policyTypes"] == ["Ingress"], "NetworkPolicy: an ingress policy")
    open_ports = sorted(p["port"] for rule in np_["spec"]["ingress"] for p in rule["ports"])
    check(open_ports == [7878, 9090], "NetworkPolicy: only 7878 and 9090 open", open_ports)

    ns = objs["Namespace"]
    check(ns["metadata"]["labels"].get("pod-security.kubernetes.io/enforce") == "privileged",
          "Namespace: Pod Security 'privileged' (SYS_ADMIN, no seccomp profile)")

    if bin_dir:
        helptext = subprocess.run([os.path.join(bin_dir, "sandboxd"), "--help"],
                                  capture_output=True, text=True).stdout
        for flag in (x for x in args if x.startswith("--")):
            if flag == "--http-listen" and flag not in helptext:
                print("note --http-listen is not in this sandboxd yet (the manifest is ahead)")
                continue
            check(f"  {flag} " in helptext, f"sandboxd knows {flag}")
