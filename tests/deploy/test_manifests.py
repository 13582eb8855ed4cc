"""Deployment files, checked offline (no cluster, no container engine):

- every kustomize target under deploy/kubernetes and deploy/kserve renders
  (`kubectl kustomize`) and passes tests/deploy/js/validate.mjs (Kubernetes
  OpenAPI schemas, unknown fields, KServe CRD fields, infera's own rules);
- deliberately broken copies are rejected, each for its own reason;
- the Dockerfile copies only files that exist, installs only Debian 12
  packages (its build stage only the project's own build dependencies),
  runs as a non-root user and has a HEALTHCHECK; no model is baked in;
- the systemd unit passes `systemd-analyze verify` and stops within its
  drain; the shell scripts pass `bash -n` (and shellcheck where installed).
"""
import glob
import os
import re
import shutil
import subprocess
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
INFERA = os.path.abspath(os.environ.get("INFERA_BIN", os.path.join(REPO, "build", "tools", "infera")))
VALIDATOR = os.path.join(HERE, "js", "validate.mjs")
ALERTS = os.path.join(REPO, "deploy", "prometheus", "alerts.yml")


def kustomize_targets(root):
    """Folders with a kustomization.yaml that are meant to be rendered."""
    dirs = [os.path.dirname(p) for p in glob.glob(os.path.join(root, "deploy", "**", "kustomization.yaml"),
                                                   recursive=True)]
    return sorted(dirs)


def render(target, out_dir, prefix=""):
    r = subprocess.run(["kubectl", "kustomize", target], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise AssertionError(f"kubectl kustomize {target} failed: {r.stderr}")
    name = prefix + os.path.relpath(target, os.path.join(target, "..", "..")).replace("/", "_") + ".yaml"
    path = os.path.join(out_dir, name)
    with open(path, "w") as f:
        f.write(r.stdout)
    return path


def validate(paths):
    return subprocess.run(["node", VALIDATOR, "--alerts", ALERTS, *paths], capture_output=True, text=True,
                          timeout=300)


class ManifestTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if shutil.which("kubectl") is None:
            raise unittest.SkipTest("kubectl is not installed: run scripts/install-deps.sh")
        if not os.path.isdir(os.path.join(HERE, "js", "node_modules")):
            raise AssertionError("run `npm ci --prefix tests/deploy/js` (scripts/test.sh does)")

    def test_every_target_renders_and_validates(self):
        targets = kustomize_targets(REPO)
        names = {os.path.relpath(t, REPO) for t in targets}
        for expected in ("deploy/kubernetes/base", "deploy/kubernetes/overlays/production",
                         "deploy/kubernetes/overlays/model-download", "deploy/kubernetes/overlays/parallel",
                         "deploy/kserve"):
            self.assertIn(expected, names)
        with tempfile.TemporaryDirectory() as d:
            rendered = [render(t, d) for t in targets]
            r = validate(rendered)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("ok:", r.stdout)
            kinds = set()
            for p in rendered:
                with open(p) as f:
                    kinds |= set(re.findall(r"^kind: (\w+)$", f.read(), re.M))
        for kind in ("Deployment", "Service", "PodDisruptionBudget", "ServiceMonitor", "PrometheusRule",
                     "HorizontalPodAutoscaler", "ConfigMap", "StatefulSet", "ClusterServingRuntime",
                     "InferenceService"):
            self.assertIn(kind, kinds)

    # Each broken copy of deploy/ below must fail validation with its own
    # messages. The validator's TypeScript check costs seconds per run, so
    # all the copies are rendered side by side (file names prefixed with the
    # copy's name, which the validator's messages start with) and validated
    # in one run, once for the class.
    BROKEN = {
        "misspelt": ({"deploy/kubernetes/base/deployment.yaml": ("livenessProbe:", "livenesProbe:")},
                     ["'\"livenesProbe\"' does not exist in type 'IContainer'"]),
        "wrong-type": ({"deploy/kubernetes/base/deployment.yaml": ("replicas: 2", "replicas: two")},
                       ["spec/replicas must be integer"]),
        "kserve": ({"deploy/kserve/inference-service.yaml": ("storageUri: pvc", "storageURI: pvc"),
                    "deploy/kserve/cluster-serving-runtime.yaml": ("autoSelect: true", "autoSelect: yes-please")},
                   ["'\"storageURI\"' does not exist in type 'ModelSpec'",
                    "Type 'string' is not assignable to type 'boolean"]),
        "grace": ({"deploy/kubernetes/base/deployment.yaml": ("terminationGracePeriodSeconds: 80",
                                                             "terminationGracePeriodSeconds: 30")},
                  ["terminationGracePeriodSeconds 30 must exceed"]),
        "hpa-metric": ({"deploy/kubernetes/overlays/production/hpa.yaml": ("name: infera_num_requests_waiting",
                                                                          "name: infera_queue_depth")},
                       ["metric infera_queue_depth is not served by any prometheus-adapter rule",
                        "metric infera_queue_depth is not one infera exports"]),
        "alerts": ({"deploy/kubernetes/overlays/production/prometheusrule.yaml": ("for: 1m", "for: 2m")},
                   ["groups differ from deploy/prometheus/alerts.yml"]),
    }
    broken_run = None

    @classmethod
    def validate_broken_copies(cls):
        """{copy name: the validator's lines about its files}, the exit code."""
        if cls.broken_run is not None:
            return cls.broken_run
        lines = {name: [] for name in cls.BROKEN}
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "rendered")
            os.mkdir(out)
            rendered = []
            for name, (edits, _) in cls.BROKEN.items():
                root = os.path.join(tmp, name)
                shutil.copytree(os.path.join(REPO, "deploy"), os.path.join(root, "deploy"))
                for rel, (old, new) in edits.items():
                    path = os.path.join(root, rel)
                    with open(path) as f:
                        text = f.read()
                    if old not in text:
                        raise AssertionError(f"{name}: {rel} has no {old!r} to break")
                    with open(path, "w") as f:
                        f.write(text.replace(old, new, 1))
                rendered += [render(t, out, prefix=f"{name}--") for t in kustomize_targets(root)]
            r = validate(rendered)
        for line in r.stdout.splitlines():
            name = line.split("--", 1)[0]
            if name in lines:
                lines[name].append(line)
        cls.broken_run = (lines, r.returncode, r.stdout + r.stderr)
        return cls.broken_run

    def broken(self, name):
        """Expects the validator to report each of the copy's messages about
        its own files."""
        lines, code, output = self.validate_broken_copies()
        self.assertEqual(code, 1, output)
        text = "\n".join(lines[name])
        for message in self.BROKEN[name][1]:
            self.assertIn(message, text, output)

    def test_misspelt_field_is_rejected(self):
        self.broken("misspelt")

    def test_wrong_type_is_rejected(self):
        self.broken("wrong-type")

    def test_broken_kserve_is_rejected(self):
        self.broken("kserve")

    def test_grace_period_shorter_than_drain_is_rejected(self):
        self.broken("grace")

    def test_hpa_metric_must_be_served(self):
        self.broken("hpa-metric")

    def test_prometheusrule_follows_alerts_yml(self):
        self.broken("alerts")


class DockerfileTest(unittest.TestCase):
    def setUp(self):
        with open(os.path.join(REPO, "Dockerfile")) as f:
            self.text = f.read()
        # Continuation lines joined: one instruction per line.
        self.instructions = [l.strip() for l in re.sub(r"\\\n", " ", self.text).splitlines()
                             if l.strip() and not l.lstrip().startswith("#")]

    def stages(self):
        out, current = {}, None
        for ins in self.instructions:
            m = re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", ins, re.I)
            if m:
                current = m.group(2) or m.group(1)
                out[current] = {"base": m.group(1), "lines": []}
            elif current:
                out[current]["lines"].append(ins)
        return out

    def apt_packages(self, lines):
        pkgs = []
        for ins in lines:
            for m in re.finditer(r"apt-get install ([^&|;]*)", ins):
                pkgs += [w for w in m.group(1).split() if not w.startswith("-")]
        return pkgs

    def test_copied_files_exist_and_no_model(self):
        with open(os.path.join(REPO, ".dockerignore")) as f:
            ignored = [l.strip().rstrip("/") for l in f if l.strip() and not l.startswith("#")]
        copies = [ins for ins in self.instructions if ins.upper().startswith("COPY") and "--from" not in ins]
        self.assertGreater(len(copies), 0)
        for ins in copies:
            srcs = ins.split()[1:-1]
            for src in srcs:
                self.assertTrue(os.path.exists(os.path.join(REPO, src)), f"{ins}: {src} does not exist")
                self.assertFalse(any(src.rstrip("/") == i for i in ignored), f"{src} is in .dockerignore")
                self.assertNotIn("models", src, "the image must not bake in a model")
                self.assertFalse(src.endswith(".gguf"))
        # What CMake needs of the tree: every add_subdirectory of the copied
        # CMakeLists (tests and bench are switched off).
        with open(os.path.join(REPO, "CMakeLists.txt")) as f:
            cmake = f.read()
        copied = {s.rstrip("/") for ins in copies for s in ins.split()[1:-1]}
        for sub in re.findall(r"^add_subdirectory\((\w+)\)", cmake, re.M):
            self.assertIn(sub, copied, f"CMakeLists.txt needs {sub}/")
        self.assertIn("-DINFERA_TESTS=OFF", self.text)
        self.assertIn("-DINFERA_BENCH=OFF", self.text)

    def test_packages_are_debian_and_the_projects(self):
        stages = self.stages()
        self.assertEqual(list(stages), ["build", "runtime"])
        self.assertEqual(stages["build"]["base"], "debian:12")
        self.assertEqual(stages["runtime"]["base"], "debian:12-slim")
        project = set()
        with open(os.path.join(REPO, "scripts", "install-deps.sh")) as f:
            in_list = False
            for line in f:
                line = line.split("#", 1)[0].strip()
                if line.startswith("PKGS=("):
                    in_list = True
                    line = line[len("PKGS=("):]
                if in_list:
                    if line.endswith(")"):
                        in_list = False
                        line = line[:-1]
                    project.update(line.split())
        build_pkgs = self.apt_packages(stages["build"]["lines"])
        self.assertGreater(len(build_pkgs), 5)
        for p in build_pkgs:
            self.assertIn(p, project, f"build stage installs {p}, which scripts/install-deps.sh does not")
        runtime_pkgs = self.apt_packages(stages["runtime"]["lines"])
        self.assertGreater(len(runtime_pkgs), 3)
        if shutil.which("apt-cache") is None:
            self.skipTest("no apt-cache: cannot check the runtime packages against Debian's lists")
        # One apt-cache call for all (each call reads the whole package cache,
        # about 0.9 s): a name it does not know prints no record.
        r = subprocess.run(["apt-cache", "show", "--no-all-versions", *runtime_pkgs], capture_output=True, text=True)
        known = set(re.findall(r"^Package: (\S+)$", r.stdout, re.M))
        for p in runtime_pkgs:
            self.assertIn(p, known, f"runtime stage installs {p}, not a Debian 12 package")
        # The runtime libraries cover what the binary links dynamically.
        if os.path.exists(INFERA) and shutil.which("ldd") and shutil.which("dpkg"):
            ldd = subprocess.run(["ldd", INFERA], capture_output=True, text=True).stdout
            libs = re.findall(r"=> (\S+)", ldd)
            # `package[:arch]: path` per line for the files dpkg knows.
            r = subprocess.run(["dpkg", "-S", *[os.path.realpath(lib) for lib in libs]], capture_output=True,
                               text=True)
            owners = {line.split(":")[0] for line in r.stdout.splitlines() if ": " in line}
            for must in ("libfmt9", "libspdlog1.10", "libpcre2-8-0", "libopenmpi3"):
                if must in owners:
                    self.assertIn(must, runtime_pkgs)
        # OpenBLAS is dlopen'ed by GPTQ / AWQ / SparseGPT (src/base/linalg.cc):
        # ldd cannot show it, so it is required by name.
        self.assertIn("libopenblas0-pthread", runtime_pkgs)

    def test_runtime_is_non_root_with_healthcheck(self):
        runtime = self.stages()["runtime"]["lines"]
        users = [l for l in runtime if l.upper().startswith("USER")]
        self.assertEqual(len(users), 1)
        self.assertNotIn(users[0].split()[1].split(":")[0], ("root", "0"))
        health = [l for l in runtime if l.upper().startswith("HEALTHCHECK")]
        self.assertEqual(len(health), 1)
        self.assertIn("/health", health[0])


class SystemdTest(unittest.TestCase):
    UNIT = os.path.join(REPO, "deploy", "systemd", "infera@.service")

    def test_unit_verifies(self):
        if shutil.which("systemd-analyze") is None:
            self.skipTest("no systemd-analyze")
        with open(self.UNIT) as f:
            text = f.read()
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "infera@8081.service")
            with open(path, "w") as f:
                f.write(text.replace("/usr/local/bin/infera", INFERA))
            r = subprocess.run(["systemd-analyze", "verify", path], capture_output=True, text=True)
            self.assertEqual((r.returncode, r.stderr.strip()), (0, ""), r.stderr)
        stop = int(re.search(r"^TimeoutStopSec=(\d+)", text, re.M).group(1))
        drain = int(re.search(r"^Environment=INFERA_DRAIN_TIMEOUT=(\d+)", text, re.M).group(1))
        self.assertGreater(stop, drain, "systemd would SIGKILL a replica before its drain ends")
        self.assertRegex(text, r"(?m)^Restart=on-failure$")
        self.assertRegex(text, r"(?m)^KillSignal=SIGTERM$")

    def test_scripts(self):
        scripts = [os.path.join(REPO, "deploy", "systemd", "rolling-restart.sh"),
                   os.path.join(REPO, "deploy", "kubernetes", "overlays", "parallel", "launch.sh")]
        for s in scripts:
            r = subprocess.run(["bash", "-n", s], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
        if shutil.which("shellcheck"):
            r = subprocess.run(["shellcheck", *scripts], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout)
        r = subprocess.run(["bash", scripts[0]], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)


if __name__ == "__main__":
    unittest.main()
