package scheduler

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster/localclustertest"
)

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
	binDir    string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lifeboat-scheduler-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildBinary builds cmd/lifeboat-scheduler once per test run.
func buildBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binary = filepath.Join(binDir, "lifeboat-scheduler")
		cmd := exec.Command("go", "build", "-o", binary, "./cmd/lifeboat-scheduler")
		cmd.Dir = repoPath(t)
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ./cmd/lifeboat-scheduler: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// renderManifests builds manifests/scheduler with kustomize, as `kubectl apply -k` would.
func renderManifests(t *testing.T) string {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), repoPath(t, "manifests", "scheduler"))
	if err != nil {
		t.Fatalf("kustomize build manifests/scheduler: %v", err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// impersonatingProxy serves the API on a loopback HTTP port with the admin credentials,
// impersonating user (kubectl proxy's trick, plus impersonation). The binary reaches the
// apiserver through --master without touching the configuration file, and gets exactly the
// manifests' RBAC.
func impersonatingProxy(t *testing.T, cfg *rest.Config, user string, groups ...string) string {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	target, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = transport
	proxy.FlushInterval = -1 // stream watches
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: proxy, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		_ = srv.Close()
	})
	return "http://" + ln.Addr().String()
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// runBinary starts the scheduler binary; it is stopped (SIGTERM, then SIGKILL) when the test
// ends, and its output is printed if the test failed. exited is closed when the process ends;
// then *exitErr holds cmd.Wait's result.
func runBinary(t *testing.T, args ...string) (out *bytes.Buffer, exited <-chan struct{}, exitErr *error) {
	t.Helper()
	cmd := exec.Command(buildBinary(t), args...)
	out = &bytes.Buffer{}
	w := &syncWriter{w: out}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		}
		if t.Failed() {
			t.Logf("lifeboat-scheduler output:\n%s", w.String())
		}
	})
	return out, done, &waitErr
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}

// TestBinaryWithManifests applies manifests/scheduler (kustomize) to the local apiserver and
// runs the built binary with the exact config.yaml, under the manifests' ServiceAccount RBAC.
func TestBinaryWithManifests(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the local control plane")
	}
	c := localclustertest.StartT(t, localcluster.Options{})
	client := c.Client()
	ctx := context.Background()

	manifests := renderManifests(t)
	if err := c.ApplyYAML(ctx, manifests); err != nil {
		t.Fatalf("apply manifests/scheduler: %v", err)
	}

	t.Run("the Deployment's Pod passes Pod Security restricted", func(t *testing.T) {
		dep, err := client.AppsV1().Deployments(v1alpha1.DefaultNamespace).Get(ctx, "lifeboat-scheduler", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if *dep.Spec.Replicas != 2 {
			t.Errorf("replicas = %d, want 2", *dep.Spec.Replicas)
		}
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "psa-check-", Namespace: v1alpha1.DefaultNamespace, Labels: dep.Spec.Template.Labels}, Spec: dep.Spec.Template.Spec}
		// The namespace enforces restricted: a dry-run create fails on any violation.
		if _, err := client.CoreV1().Pods(v1alpha1.DefaultNamespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("the Deployment's Pod is rejected in %s: %v", v1alpha1.DefaultNamespace, err)
		}
		ns, err := client.CoreV1().Namespaces().Get(ctx, v1alpha1.DefaultNamespace, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ns.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
			t.Errorf("namespace labels %v, want enforce=restricted", ns.Labels)
		}
		checkConfigMapMatchesFile(t, client, dep)
	})

	t.Run("the binary leads on its own lease and schedules", func(t *testing.T) {
		master := impersonatingProxy(t, c.RESTConfig(), "system:serviceaccount:lifeboat-system:lifeboat-scheduler",
			"system:serviceaccounts", "system:serviceaccounts:lifeboat-system", "system:authenticated")
		port := freePort(t)
		_, exited, exitErr := runBinary(t, "--config="+manifestConfig(t), "--master="+master, fmt.Sprintf("--secure-port=%d", port), "--v=2")

		var holder string
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			select {
			case <-exited:
				return false, fmt.Errorf("lifeboat-scheduler exited: %v", *exitErr)
			default:
			}
			lease, err := client.CoordinationV1().Leases(v1alpha1.DefaultNamespace).Get(ctx, "lifeboat-scheduler", metav1.GetOptions{})
			if err != nil || lease.Spec.HolderIdentity == nil {
				return false, nil
			}
			holder = *lease.Spec.HolderIdentity
			return holder != "", nil
		})
		if err != nil {
			t.Fatalf("lease lifeboat-system/lifeboat-scheduler never acquired: %v", err)
		}
		t.Logf("lease held by %s", holder)
		if _, err := client.CoordinationV1().Leases("kube-system").Get(ctx, "kube-scheduler", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("kube-system/kube-scheduler lease: err = %v, want NotFound (never take the default scheduler's lease)", err)
		}

		ns := createNamespace(t, client, "binary")
		createNodes(t, client,
			nodeSpec{name: "ordinary", labels: spotLabels("m5.large", "us-east-1a")},
			nodeSpec{name: "lb-active", labels: poolLabels(v1alpha1.NodeStateActive, "m5.large", "us-east-1b"), taints: []v1.Taint{lifeboatTaint}},
		)
		createPods(t, client, makePod(ns, "protected", protected), makePod(ns, "plain"))
		placement := waitBound(t, client, ns, 2)
		if placement["protected"] != "lb-active" || placement["plain"] != "ordinary" {
			t.Errorf("placement = %v, want protected on lb-active and plain on ordinary", placement)
		}

		// Health endpoints are served without credentials (kube-scheduler's defaults).
		httpClient := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed serving cert
		for _, path := range []string{"/healthz", "/readyz", "/livez"} {
			resp, err := httpClient.Get(fmt.Sprintf("https://127.0.0.1:%d%s", port, path))
			if err != nil {
				t.Errorf("GET %s: %v", path, err)
				continue
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("GET %s: %s", path, resp.Status)
			}
		}
	})
}

// checkConfigMapMatchesFile: the ConfigMap kustomize generated carries config.yaml verbatim.
func checkConfigMapMatchesFile(t *testing.T, client kubernetes.Interface, dep *appsv1.Deployment) {
	t.Helper()
	want, err := os.ReadFile(manifestConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	var cmName string
	for _, vol := range dep.Spec.Template.Spec.Volumes {
		if vol.ConfigMap != nil {
			cmName = vol.ConfigMap.Name
		}
	}
	cm, err := client.CoreV1().ConfigMaps(v1alpha1.DefaultNamespace).Get(context.Background(), cmName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("ConfigMap %s mounted by the Deployment: %v", cmName, err)
	}
	if cm.Data["config.yaml"] != string(want) {
		t.Errorf("ConfigMap %s differs from manifests/scheduler/config.yaml", cmName)
	}
}

// TestBinaryRejectsInvalidArgs: bad plugin args stop the binary at start with a message that
// names the plugin and the field.
func TestBinaryRejectsInvalidArgs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	base, err := os.ReadFile(manifestConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, old, new string
		want           []string
	}{
		{
			name: "negative hot pool penalty", old: "hotPoolPenalty: 1", new: "hotPoolPenalty: -2",
			want: []string{"CapacityPoolSpread", "hotPoolPenalty", "must be between 0"},
		},
		{
			name: "zero half-life", old: "hotPoolHalfLife: 10m", new: "hotPoolHalfLife: 0s",
			want: []string{"CapacityPoolSpread", "hotPoolHalfLife"},
		},
		{
			name: "malformed taint key", old: "interruptionTaintKeys: [karpenter.sh/disrupted, lifeboat.dev/interrupted]", new: "interruptionTaintKeys: [\"karpenter.sh/dis rupted\"]",
			want: []string{"LifeboatPlacement", "interruptionTaintKeys[0]"},
		},
		{
			name: "standby taint passed to protected pods", old: "protectedPodTaintKeys: [lifeboat.dev/lifeboat]", new: "protectedPodTaintKeys: [lifeboat.dev/lifeboat, lifeboat.dev/standby]",
			want: []string{"LifeboatTaints", "protectedPodTaintKeys[1]", "standby"},
		},
		{
			name: "misspelt field", old: "hotPoolPenalty: 1", new: "hotPoolPenality: 1",
			want: []string{"CapacityPoolSpread", "unknown field", "hotPoolPenality"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !bytes.Contains(base, []byte(tt.old)) {
				t.Fatalf("manifests/scheduler/config.yaml no longer contains %q; update the test", tt.old)
			}
			path := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(path, bytes.Replace(base, []byte(tt.old), []byte(tt.new), 1), 0o600); err != nil {
				t.Fatal(err)
			}
			// Nothing listens on the master: the configuration must be refused before any API call.
			out, exited, exitErr := runBinary(t, "--config="+path, fmt.Sprintf("--master=http://127.0.0.1:%d", freePort(t)), "--secure-port=0")
			select {
			case <-exited:
				var ee *exec.ExitError
				if !errors.As(*exitErr, &ee) || ee.ExitCode() == 0 {
					t.Fatalf("exit: %v, want a non-zero exit code", *exitErr)
				}
			case <-time.After(60 * time.Second):
				t.Fatal("lifeboat-scheduler accepted the invalid configuration and kept running")
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output does not mention %q:\n%s", w, out.String())
				}
			}
		})
	}
}
