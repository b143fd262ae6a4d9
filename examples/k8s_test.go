package examples

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// manifests are the decoded objects of one or more manifest files.
type manifests struct {
	deployments []*appsv1.Deployment
	services    []*corev1.Service
	configMaps  []*corev1.ConfigMap
	pdbs        []*policyv1.PodDisruptionBudget
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// decodeManifests decodes every document of b strictly (an unknown or
// misspelt field is an error) into the k8s.io/api type its apiVersion and
// kind name; a kind this function does not know is an error too.
func decodeManifests(t *testing.T, file string, b []byte, into *manifests) {
	t.Helper()
	for i, doc := range docSeparator.Split(string(b), -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("%s: document %d: %v", file, i, err)
		}
		var obj any
		switch tm.APIVersion + " " + tm.Kind {
		case "apps/v1 Deployment":
			d := &appsv1.Deployment{}
			into.deployments, obj = append(into.deployments, d), d
		case "v1 Service":
			s := &corev1.Service{}
			into.services, obj = append(into.services, s), s
		case "v1 ConfigMap":
			c := &corev1.ConfigMap{}
			into.configMaps, obj = append(into.configMaps, c), c
		case "policy/v1 PodDisruptionBudget":
			p := &policyv1.PodDisruptionBudget{}
			into.pdbs, obj = append(into.pdbs, p), p
		default:
			t.Fatalf("%s: document %d: unexpected kind %q of %q", file, i, tm.Kind, tm.APIVersion)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("%s: document %d (%s): %v", file, i, tm.Kind, err)
		}
	}
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// checkManifests decodes a manifest file strictly and checks what each
// object must say for limiterd.
func checkManifests(t *testing.T, file string) {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var m manifests
	decodeManifests(t, file, b, &m)
	for _, c := range m.configMaps {
		checkConfigMap(t, file, c)
	}
	for _, d := range m.deployments {
		if d.Name == "limiterd" {
			checkDeployment(t, file, d)
		}
	}
	for _, p := range m.pdbs {
		if p.Spec.Selector == nil || (p.Spec.MinAvailable == nil) == (p.Spec.MaxUnavailable == nil) {
			t.Errorf("%s: PodDisruptionBudget %s needs a selector and one of minAvailable, maxUnavailable", file, p.Name)
		}
	}
}

// checkConfigMap checks that limiterd's ConfigMaps hold the example files
// unchanged, and loads them as limiterd does.
func checkConfigMap(t *testing.T, file string, c *corev1.ConfigMap) {
	switch c.Name {
	case "limiterd-config":
		want, err := os.ReadFile("limiterd.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if c.Data["limiterd.yaml"] != string(want) {
			t.Errorf("%s: limiterd.yaml differs from examples/limiterd.yaml; keep them equal", file)
		}
		checkLimiterdConfig(t, c.Data["limiterd.yaml"])
	case "limiterd-rules":
		files, err := filepath.Glob("rules/*.yaml")
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for name, content := range c.Data {
			names = append(names, name)
			checkRules(t, file+": "+name, content)
			want, err := os.ReadFile(path.Join("rules", name))
			if err != nil || string(want) != content {
				t.Errorf("%s: %s differs from examples/rules/%s; keep them equal", file, name, name)
			}
		}
		slices.Sort(names)
		for i := range files {
			files[i] = path.Base(files[i])
		}
		if !slices.Equal(names, files) {
			t.Errorf("%s: holds %v; examples/rules has %v", file, names, files)
		}
	default:
		t.Errorf("%s: unexpected ConfigMap %s", file, c.Name)
	}
}

// checkDeployment checks limiterd's pod: gRPC probes on the gRPC port, the
// rule directory mounted whole (a subPath mount never sees the kubelet's
// ..data swap), the configuration file inside a mounted ConfigMap, sizes
// set, a non-root user.
func checkDeployment(t *testing.T, file string, d *appsv1.Deployment) {
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%s: %d containers, want 1", file, len(spec.Containers))
	}
	c := spec.Containers[0]
	for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.GRPC == nil || p.GRPC.Port != 8081 {
			t.Errorf("%s: the %s probe must be a grpc probe on port 8081", file, name)
		}
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, vm := range c.VolumeMounts {
		mounts[vm.MountPath] = vm
		if vm.SubPath != "" || vm.SubPathExpr != "" {
			t.Errorf("%s: mount %s uses a subPath: ConfigMap updates would never reach it", file, vm.MountPath)
		}
	}
	if _, ok := mounts["/etc/limiterd/rules"]; !ok {
		t.Errorf("%s: the rules ConfigMap is not mounted at /etc/limiterd/rules, examples/limiterd.yaml's rules_dir", file)
	}
	for _, a := range c.Args {
		if cfg, ok := strings.CutPrefix(a, "--config="); ok {
			if _, ok := mounts[path.Dir(cfg)]; !ok {
				t.Errorf("%s: --config %s is not in a mounted directory", file, cfg)
			}
		}
	}
	r := c.Resources
	if r.Requests.Cpu().IsZero() || r.Requests.Memory().IsZero() || r.Limits.Memory().IsZero() {
		t.Errorf("%s: set requests.cpu, requests.memory and limits.memory", file)
	}
	if sc := spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("%s: the pod must run as non-root", file)
	}
}

// kustomization is the part of kustomize's Kustomization the example uses,
// decoded with KnownFields.
type kustomization struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Labels     []struct {
		Pairs            map[string]string `yaml:"pairs"`
		IncludeSelectors bool              `yaml:"includeSelectors"`
	} `yaml:"labels"`
	Resources []string `yaml:"resources"`
	Images    []struct {
		Name    string `yaml:"name"`
		NewName string `yaml:"newName"`
		NewTag  string `yaml:"newTag"`
	} `yaml:"images"`
}

// checkKustomization checks that the kustomization lists every manifest of
// its directory and nothing else, that the objects fit together (the
// Service and the budget select limiterd's pods, the Service's target
// ports are the container's), and, where kubectl is installed, that
// `kubectl kustomize` renders objects that decode strictly.
func checkKustomization(t *testing.T, file string) {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	decodeStrict(t, file, b, &k)
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Errorf("%s: apiVersion %q kind %q", file, k.APIVersion, k.Kind)
	}
	dir := path.Dir(file)
	all, err := filepath.Glob(path.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, f := range all {
		if f != filepath.FromSlash(file) {
			want = append(want, path.Base(filepath.ToSlash(f)))
		}
	}
	got := slices.Sorted(slices.Values(k.Resources))
	if !slices.Equal(got, want) {
		t.Errorf("%s: resources %v; the directory's manifests are %v", file, got, want)
	}
	var m manifests
	for _, r := range k.Resources {
		b, err := os.ReadFile(path.Join(dir, r))
		if err != nil {
			t.Fatal(err)
		}
		decodeManifests(t, r, b, &m)
	}
	checkWiring(t, m)
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		out, err := exec.Command(kubectl, "kustomize", dir).Output()
		if err != nil {
			t.Fatalf("kubectl kustomize %s: %v", dir, err)
		}
		var rendered manifests
		decodeManifests(t, "kubectl kustomize "+dir, out, &rendered)
		checkWiring(t, rendered)
	} else {
		t.Log("kubectl is not installed: the kustomization was not rendered")
	}
}

// checkWiring checks that the objects refer to each other correctly.
func checkWiring(t *testing.T, m manifests) {
	t.Helper()
	pods := map[string]*appsv1.Deployment{}
	for _, d := range m.deployments {
		pods[d.Name] = d
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("Deployment %s: its selector does not select its pods", d.Name)
		}
		cms := map[string]bool{}
		for _, c := range m.configMaps {
			cms[c.Name] = true
		}
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.ConfigMap != nil && !cms[v.ConfigMap.Name] {
				t.Errorf("Deployment %s: volume %s names ConfigMap %s, which is not defined", d.Name, v.Name, v.ConfigMap.Name)
			}
		}
	}
	for _, s := range m.services {
		d := pods[s.Name]
		if d == nil || !matches(s.Spec.Selector, d.Spec.Template.Labels) {
			t.Errorf("Service %s does not select the pods of a Deployment of its name", s.Name)
			continue
		}
		for _, p := range s.Spec.Ports {
			if !hasPort(d.Spec.Template.Spec.Containers[0], p.TargetPort) {
				t.Errorf("Service %s: target port %s is not a port of the container", s.Name, p.TargetPort.String())
			}
		}
	}
	for _, p := range m.pdbs {
		d := pods[p.Name]
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		if d == nil || err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("PodDisruptionBudget %s does not select the pods of a Deployment of its name", p.Name)
		}
	}
}

func matches(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func hasPort(c corev1.Container, p intstr.IntOrString) bool {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return true
		}
	}
	return false
}
