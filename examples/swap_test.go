package examples

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/costwise/batcher/internal/redistest"
)

// checkSwapConfigMap loads every rule file of the swap example's ConfigMap.
func checkSwapConfigMap(t *testing.T, file string) {
	m := readManifests(t, file)
	if len(m.configMaps) != 1 || m.configMaps[0].Name != "ratelimit-config" {
		t.Fatalf("%s: want one ConfigMap ratelimit-config", file)
	}
	for name, content := range m.configMaps[0].Data {
		checkRules(t, file+": "+name, content)
	}
}

func readManifests(t *testing.T, file string) manifests {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var m manifests
	decodeManifests(t, file, b, &m)
	return m
}

// checkSwapDeployment runs limiterd as the swap example's Deployment does:
// no arguments, the container's environment (its addresses moved to free
// loopback ports and REDIS_URL to a test redis-server), and the ConfigMap
// laid out as the kubelet mounts it (files linked through ..data). The
// readiness path answers, the rules count to a denial, and a swap of the
// ..data link to a new version of the rules takes effect without a
// restart.
func checkSwapDeployment(t *testing.T, file string) {
	m := readManifests(t, file)
	cms := readManifests(t, "swap/configmap.yaml").configMaps
	if len(m.deployments) != 1 || len(cms) != 1 {
		t.Fatalf("%s: want one Deployment, and one ConfigMap in swap/configmap.yaml", file)
	}
	spec := m.deployments[0].Spec.Template.Spec
	c := spec.Containers[0]
	if len(c.Command) != 0 || len(c.Args) != 0 {
		t.Fatalf("%s: the container must run limiterd without arguments, configured by its environment", file)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/healthcheck" {
		t.Fatalf("%s: the readiness probe must be envoyproxy/ratelimit's GET /healthcheck", file)
	}

	// The ConfigMap volume as the kubelet lays it out.
	var mount string
	for _, vm := range c.VolumeMounts {
		if v := volume(spec.Volumes, vm.Name); v != nil && v.ConfigMap != nil && v.ConfigMap.Name == cms[0].Name {
			mount = vm.MountPath
		}
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	root := t.TempDir()
	rel, err := filepath.Rel(env["RUNTIME_ROOT"], mount)
	if mount == "" || err != nil || strings.HasPrefix(rel, "..") {
		t.Fatalf("%s: the rules ConfigMap must be mounted under RUNTIME_ROOT (%q), at %q", file, env["RUNTIME_ROOT"], mount)
	}
	dir := filepath.Join(root, rel)
	kubeletWrite(t, dir, "..v1", cms[0].Data)

	srv := redistest.StartServer(t)
	httpAddr, grpcAddr, promAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	env["RUNTIME_ROOT"] = root
	env["REDIS_URL"] = srv.Addr()
	env["HOST"], env["PORT"] = hostPort(httpAddr)
	env["GRPC_HOST"], env["GRPC_PORT"] = hostPort(grpcAddr)
	env["PROMETHEUS_ADDR"] = promAddr
	env["DEBUG_HOST"], env["DEBUG_PORT"] = hostPort(freeAddr(t))
	var environ []string
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	base := "http://" + httpAddr
	stderr := runLimiterd(t, environ, func(string) bool {
		code, _ := tryGet(base + "/healthcheck")
		return code == http.StatusOK
	})

	call := func(key string) string {
		body := `{"domain":"swap","descriptors":[{"entries":[{"key":"client_key","value":"` + key + `"}]}]}`
		code, out := post(t, base+"/json", body)
		if code != http.StatusOK && code != http.StatusTooManyRequests {
			t.Fatalf("POST /json: %d %s", code, out)
		}
		return out
	}
	for i := 1; i <= 3; i++ {
		if out := call("alice"); !strings.Contains(out, `"OK"`) {
			t.Fatalf("call %d of 3 allowed per minute: %s", i, out)
		}
	}
	if out := call("alice"); !strings.Contains(out, "OVER_LIMIT") {
		t.Fatalf("fourth call within the minute: %s; want OVER_LIMIT", out)
	}

	// A ConfigMap update: the kubelet writes a new version and swaps ..data.
	data := map[string]string{}
	for k, v := range cms[0].Data {
		data[k] = strings.Replace(v, "requests_per_unit: 3", "requests_per_unit: 1", 1)
	}
	kubeletWrite(t, dir, "..v2", data)
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		key := fmt.Sprintf("bob-%d", i) // a fresh key: its second call is refused only at the new limit
		call(key)
		if out := call(key); strings.Contains(out, "OVER_LIMIT") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ..data swap to a limit of 1 per minute was not applied within 30 s: %s", stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func volume(vs []corev1.Volume, name string) *corev1.Volume {
	for i := range vs {
		if vs[i].Name == name {
			return &vs[i]
		}
	}
	return nil
}

func hostPort(addr string) (string, string) {
	i := strings.LastIndexByte(addr, ':')
	return addr[:i], addr[i+1:]
}

// kubeletWrite lays data out in dir as the kubelet updates a ConfigMap
// volume: the files in a new hidden directory, then the ..data link
// swapped to it atomically, each file a link through ..data.
func kubeletWrite(t *testing.T, dir, version string, data map[string]string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, version), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range data {
		if err := os.WriteFile(filepath.Join(dir, version, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(version, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range data {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			t.Fatal(err)
		}
	}
}

func tryGet(url string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// post sends body as JSON to url and returns the status and the answer.
func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}
