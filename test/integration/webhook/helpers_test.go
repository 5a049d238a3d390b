package webhook

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
	"github.com/lifeboat-k8s/lifeboat/pkg/policy"
	"github.com/lifeboat-k8s/lifeboat/webhooks/pod"
	"github.com/lifeboat-k8s/lifeboat/webhooks/workload"
)

func repoPath(t testing.TB, rel string) string {
	t.Helper()
	root, err := localcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, rel)
}

// testCA is a CA and a serving certificate for 127.0.0.1 and localhost.
type testCA struct {
	caPEM   []byte
	certDir string
}

func newTestCA(t testing.TB) *testCA {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lifeboat-webhook-test-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "lifeboat-webhook"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, typ string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("tls.crt", "CERTIFICATE", der)
	write("tls.key", "EC PRIVATE KEY", keyDER)
	return &testCA{caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), certDir: dir}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// webhookProcess is lifeboat-webhook running as a child of the test.
type webhookProcess struct {
	t       testing.TB
	extra   []string // flags after the ports and TLS
	tlsDir  string   // --tls-cert-dir; empty: the extra flags set TLS up
	port    int
	health  int
	metrics int
	logPath string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{} // closed once cmd has exited; waitErr is then set
	waitErr error
}

// errPortTaken: the process exited because a port picked for it was taken between the pick and
// its bind (another test package's component can grab a port freePort saw free).
var errPortTaken = errors.New("a port picked for lifeboat-webhook was taken before it bound it")

// startWebhook runs lifeboat-webhook against the shared cluster on port (0: any free one) with
// certificates from ca (nil: the extra flags set TLS up) and waits until /readyz is OK. It is
// stopped at cleanup.
func startWebhook(t testing.TB, ca *testCA, port int, extra ...string) *webhookProcess {
	t.Helper()
	w := &webhookProcess{t: t, extra: extra, port: port,
		logPath: filepath.Join(t.TempDir(), "lifeboat-webhook.log")}
	if ca != nil {
		w.tlsDir = ca.certDir
	}
	t.Cleanup(func() {
		w.Stop()
		if t.Failed() {
			b, _ := os.ReadFile(w.logPath)
			t.Logf("lifeboat-webhook log:\n%s", tail(b, 12000))
		}
	})
	// Before anything is registered for it, the webhook port may move too.
	w.start(port == 0)
	return w
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

func (w *webhookProcess) args() []string {
	args := []string{
		"--kubeconfig=" + shared.KubeconfigPath(),
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--port=%d", w.port),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", w.health),
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", w.metrics),
		"--leader-elect=false",
		"--shutdown-delay=0s",
		"--v=4",
	}
	if w.tlsDir != "" {
		args = append(args, "--tls-cert-dir="+w.tlsDir)
	}
	return append(args, w.extra...)
}

// Start restarts the process with the same flags and webhook port (the registered webhooks
// call it there), and waits for readiness.
func (w *webhookProcess) Start() {
	w.t.Helper()
	w.start(false)
}

// start launches the process and waits for readiness. A port taken before the process bound it
// gets a new one (the webhook port only when movePort), at most three attempts.
func (w *webhookProcess) start(movePort bool) {
	w.t.Helper()
	for attempt := 1; ; attempt++ {
		if movePort || w.port == 0 {
			w.port = freePort(w.t)
		}
		w.health, w.metrics = freePort(w.t), freePort(w.t)
		err := w.launch()
		if err == nil {
			return
		}
		if errors.Is(err, errPortTaken) && attempt < 3 {
			w.t.Logf("%v; starting it again on other ports", err)
			continue
		}
		b, _ := os.ReadFile(w.logPath)
		w.t.Fatalf("%v\n%s", err, tail(b, 8000))
	}
}

// launch starts the process and polls /readyz for up to 60 s, returning early if it exits.
func (w *webhookProcess) launch() error {
	logf, err := os.OpenFile(w.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	logStart, _ := logf.Seek(0, io.SeekEnd)
	cmd := exec.Command(os.Args[0], w.args()...)
	cmd.Env = append(os.Environ(), processEnv+"=1")
	cmd.Stdout, cmd.Stderr = logf, logf
	// The child dies with the test binary even if the test is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	logf.Close()
	exited := make(chan struct{})
	w.mu.Lock()
	w.cmd, w.exited = cmd, exited
	w.mu.Unlock()
	go func() {
		err := cmd.Wait()
		w.mu.Lock()
		w.waitErr = err
		w.mu.Unlock()
		close(exited)
	}()
	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", w.health)
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		select {
		case <-exited:
			return false, errExited
		default:
		}
		resp, err := http.Get(url)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errExited):
		w.mu.Lock()
		w.cmd = nil
		waitErr := w.waitErr
		w.mu.Unlock()
		b, _ := os.ReadFile(w.logPath)
		if int64(len(b)) >= logStart && bytes.Contains(b[logStart:], []byte("address already in use")) {
			return errPortTaken
		}
		return fmt.Errorf("lifeboat-webhook exited before it was ready (%v)", waitErr)
	default:
		return fmt.Errorf("lifeboat-webhook not ready at %s: %w", url, err)
	}
}

var errExited = errors.New("exited")

// Stop sends SIGTERM (graceful shutdown) and waits for the process to exit.
func (w *webhookProcess) Stop() {
	w.mu.Lock()
	cmd, exited := w.cmd, w.exited
	w.cmd = nil
	w.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(40 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		w.t.Errorf("lifeboat-webhook did not stop within 40s of SIGTERM")
		return
	}
	w.mu.Lock()
	err := w.waitErr
	w.mu.Unlock()
	if err != nil {
		w.t.Errorf("lifeboat-webhook exited with %v after SIGTERM (want a clean exit)", err)
	}
}

// Metrics returns the text of /metrics.
func (w *webhookProcess) Metrics() string {
	w.t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", w.metrics))
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// decodeManifests reads a multi-document YAML file into JSON documents.
func decodeManifests(t testing.TB, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	var docs [][]byte
	for {
		var raw map[string]any
		if err := d.Decode(&raw); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if raw == nil {
			continue
		}
		j, err := yaml.Marshal(raw)
		if err != nil {
			t.Fatal(err)
		}
		jb, err := yaml.YAMLToJSON(j)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, jb)
	}
	return docs
}

// shippedWebhooks returns the configurations of manifests/webhook/webhooks.yaml.
func shippedWebhooks(t testing.TB) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration) {
	t.Helper()
	var m *admissionregistrationv1.MutatingWebhookConfiguration
	var v *admissionregistrationv1.ValidatingWebhookConfiguration
	for _, doc := range decodeManifests(t, repoPath(t, "manifests/webhook/webhooks.yaml")) {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "MutatingWebhookConfiguration":
			m = &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := yaml.UnmarshalStrict(doc, m); err != nil {
				t.Fatal(err)
			}
		case "ValidatingWebhookConfiguration":
			v = &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := yaml.UnmarshalStrict(doc, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	if m == nil || v == nil {
		t.Fatal("manifests/webhook/webhooks.yaml lacks a webhook configuration")
	}
	return m, v
}

// registration names the webhook configurations a test installed.
type registration struct {
	mutating, validating string
}

// registerWebhooks installs the shipped configurations under the given name suffix, pointed at
// https://host:port with caBundle (nil: left for the webhook to inject).
func registerWebhooks(t testing.TB, suffix, host string, port int, caBundle []byte) registration {
	t.Helper()
	m, v := shippedWebhooks(t)
	m.Name += suffix
	v.Name += suffix
	for i := range m.Webhooks {
		m.Webhooks[i].ClientConfig = clientConfig(host, port, pod.Path, caBundle)
	}
	for i := range v.Webhooks {
		// Each validating webhook keeps its manifest's path (workloads, evictions).
		path := workload.Path
		if svc := v.Webhooks[i].ClientConfig.Service; svc != nil && svc.Path != nil {
			path = *svc.Path
		}
		v.Webhooks[i].ClientConfig = clientConfig(host, port, path, caBundle)
	}
	ctx := context.Background()
	cs := shared.Client()
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, m, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, v, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := registration{mutating: m.Name, validating: v.Name}
	t.Cleanup(func() { unregister(t, r) })
	return r
}

func unregister(t testing.TB, r registration) {
	ctx := context.Background()
	cs := shared.Client()
	if err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, r.mutating, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Error(err)
	}
	if r.validating == "" {
		return
	}
	if err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, r.validating, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Error(err)
	}
}

func clientConfig(host string, port int, path string, caBundle []byte) admissionregistrationv1.WebhookClientConfig {
	url := fmt.Sprintf("https://%s:%d%s", host, port, path)
	return admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caBundle}
}

// applyPriorityClasses creates the tiers' classes from the manifest (idempotent).
func applyPriorityClasses(t testing.TB) {
	t.Helper()
	for _, doc := range decodeManifests(t, repoPath(t, "manifests/webhook/priorityclasses.yaml")) {
		var pc schedulingv1.PriorityClass
		if err := yaml.UnmarshalStrict(doc, &pc); err != nil {
			t.Fatal(err)
		}
		_, err := shared.Client().SchedulingV1().PriorityClasses().Create(context.Background(), &pc, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

// newNamespace creates a namespace with labels and deletes it at cleanup.
func newNamespace(t testing.TB, prefix string, labels map[string]string) string {
	t.Helper()
	ns, err := shared.Client().CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-", Labels: labels},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = shared.Client().CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

// warningCollector records the apiserver's warnings (admission warnings included).
type warningCollector struct {
	mu       sync.Mutex
	warnings []string
}

func (w *warningCollector) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.warnings = append(w.warnings, text)
}

func (w *warningCollector) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.warnings
	w.warnings = nil
	return out
}

// clientWithWarnings is an admin client whose warnings land in the collector.
func clientWithWarnings(t testing.TB) (kubernetes.Interface, *warningCollector) {
	t.Helper()
	cfg := shared.RESTConfig()
	wc := &warningCollector{}
	cfg.WarningHandler = wc
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs, wc
}

// waitForPods waits until the selector matches n Pods and returns them.
func waitForPods(t testing.TB, ns, selector string, n int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := shared.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		pods = list.Items
		return len(pods) >= n, nil
	})
	if err != nil {
		t.Fatalf("waiting for %d Pods %q in %s: %v (have %d)", n, selector, ns, err, len(pods))
	}
	return pods
}

// checkPriorityConsistent asserts what the apiserver would otherwise reject or silently get
// wrong: the Pod's priority and preemptionPolicy are those of its class.
func checkPriorityConsistent(t testing.TB, p *corev1.Pod) {
	t.Helper()
	if p.Spec.PriorityClassName == "" {
		return
	}
	pc, err := shared.Client().SchedulingV1().PriorityClasses().Get(context.Background(), p.Spec.PriorityClassName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Pod %s names class %s: %v", p.Name, p.Spec.PriorityClassName, err)
	}
	if p.Spec.Priority == nil || *p.Spec.Priority != pc.Value {
		t.Errorf("Pod %s: priority %v, class %s has %d", p.Name, p.Spec.Priority, pc.Name, pc.Value)
	}
	if pc.PreemptionPolicy != nil && (p.Spec.PreemptionPolicy == nil || *p.Spec.PreemptionPolicy != *pc.PreemptionPolicy) {
		t.Errorf("Pod %s: preemptionPolicy %v, class %s has %s", p.Name, p.Spec.PreemptionPolicy, pc.Name, *pc.PreemptionPolicy)
	}
}

// checkProtected asserts a Pod carries its tier's placement exactly once.
func checkProtected(t testing.TB, p *corev1.Pod, tier v1alpha1.Tier, wantClass string) {
	t.Helper()
	if p.Labels[v1alpha1.LabelProtected] != "true" || p.Labels[v1alpha1.LabelTier] != string(tier) {
		t.Errorf("Pod %s labels %v, want protected tier %s", p.Name, p.Labels, tier)
	}
	// No lifeboat is active in these tests: the Pod keeps the default scheduler
	// (TestSchedulerRoutingFollowsLifeboats).
	if p.Spec.SchedulerName != corev1.DefaultSchedulerName {
		t.Errorf("Pod %s schedulerName %q, want %s while no lifeboat is active", p.Name, p.Spec.SchedulerName, corev1.DefaultSchedulerName)
	}
	if p.Spec.PriorityClassName != wantClass {
		t.Errorf("Pod %s priorityClassName %q, want %q", p.Name, p.Spec.PriorityClassName, wantClass)
	}
	spot := 0
	for _, tol := range p.Spec.Tolerations {
		if tol.Key == v1alpha1.TaintSpot {
			spot++
		}
		if tol.Key == v1alpha1.TaintLifeboat {
			t.Errorf("Pod %s tolerates the lifeboat taint", p.Name)
		}
	}
	wantSpot := 1
	if tier == v1alpha1.TierCritical {
		wantSpot = 0
	}
	if spot != wantSpot {
		t.Errorf("Pod %s has %d Spot tolerations, want %d: %v", p.Name, spot, wantSpot, p.Spec.Tolerations)
	}
	mentions := 0
	if na := nodeAffinity(p); na != nil {
		if na.RequiredDuringSchedulingIgnoredDuringExecution != nil {
			for _, term := range na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
				mentions += countCapacity(term)
			}
		}
		for _, pt := range na.PreferredDuringSchedulingIgnoredDuringExecution {
			mentions += countCapacity(pt.Preference)
		}
	}
	if mentions == 0 {
		t.Errorf("Pod %s has no capacity-type affinity: %+v", p.Name, p.Spec.Affinity)
	}
	checkPriorityConsistent(t, p)
}

func nodeAffinity(p *corev1.Pod) *corev1.NodeAffinity {
	if p.Spec.Affinity == nil {
		return nil
	}
	return p.Spec.Affinity.NodeAffinity
}

func countCapacity(term corev1.NodeSelectorTerm) int {
	n := 0
	for _, r := range term.MatchExpressions {
		if r.Key == v1alpha1.LabelCapacityType {
			n++
		}
	}
	return n
}

// checkUntouched asserts the webhook did not mutate a Pod.
func checkUntouched(t testing.TB, p *corev1.Pod) {
	t.Helper()
	if _, ok := p.Labels[v1alpha1.LabelProtected]; ok || p.Spec.SchedulerName == v1alpha1.SchedulerName {
		t.Errorf("Pod %s/%s was mutated: labels %v, scheduler %s", p.Namespace, p.Name, p.Labels, p.Spec.SchedulerName)
	}
}

// checkAllowlisted asserts the class is one the webhook may assign or one the test chose.
func checkAllowlisted(t testing.TB, p *corev1.Pod, userClasses ...string) {
	t.Helper()
	c := p.Spec.PriorityClassName
	if c == "" || policy.DefaultConfig().Allowed(c) {
		return
	}
	for _, u := range userClasses {
		if c == u {
			return
		}
	}
	t.Errorf("Pod %s has class %q, neither allowlisted nor the user's", p.Name, c)
}

// containsAll reports whether s contains every substring.
func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// The helper's own check: a webhook whose port is taken exits at once, and launch says so
// (errPortTaken, which start answers with other ports) instead of polling /readyz for a minute.
func TestLaunchReportsATakenPort(t *testing.T) {
	applyPriorityClasses(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	w := &webhookProcess{t: t, tlsDir: newTestCA(t).certDir, port: l.Addr().(*net.TCPAddr).Port,
		health: freePort(t), metrics: freePort(t), logPath: filepath.Join(t.TempDir(), "lifeboat-webhook.log")}
	// A poll that missed the exit would end in its timeout error, not errPortTaken.
	if err = w.launch(); !errors.Is(err, errPortTaken) {
		w.Stop()
		t.Fatalf("launch on a taken port: want errPortTaken, got %v", err)
	}
}
