package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/webhooks/pod"
)

// referenceWebhook is the floor against which lifeboat-webhook's cost is judged: a minimal
// HTTPS (HTTP/2) server in the test process that answers every review with a fixed response —
// the very patch lifeboat-webhook returns for the benchmark's Pods — after finding the request's
// UID, and does nothing else. The difference between "without" and "reference" is what the
// apiserver pays for calling any mutating webhook that makes this mutation; the difference between
// "reference" and "with" is lifeboat-webhook's own share.
type referenceWebhook struct {
	url   string
	ca    []byte
	patch []byte
}

func startReferenceWebhook(b testing.TB, cs kubernetes.Interface, ca *testCA, w *webhookProcess, j *batchv1.Job) *referenceWebhook {
	b.Helper()
	ctx := context.Background()
	// The Pod as the apiserver admits it (defaulted, in-tree admission applied), no webhook yet.
	admitted, err := cs.CoreV1().Pods(j.Namespace).Create(ctx, jobPod(j, "reference-probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		b.Fatal(err)
	}
	admitted.APIVersion, admitted.Kind = "v1", "Pod"
	raw, err := json.Marshal(admitted)
	if err != nil {
		b.Fatal(err)
	}
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: types.UID("reference"), Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, Namespace: j.Namespace,
			Name: admitted.Name, Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw},
		},
	}
	body, _ := json.Marshal(review)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.caPEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := client.Post(fmt.Sprintf("https://127.0.0.1:%d%s", w.port, pod.Path), "application/json", bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	defer client.CloseIdleConnections()
	defer resp.Body.Close()
	var answer admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil || answer.Response == nil || len(answer.Response.Patch) == 0 {
		b.Fatalf("lifeboat-webhook returned no patch for the reference (err %v): %+v", err, answer.Response)
	}

	ref := &referenceWebhook{ca: ca.caPEM, patch: answer.Response.Patch}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(ref.serve))
	srv.EnableHTTP2 = true
	cert, err := tls.LoadX509KeyPair(filepath.Join(ca.certDir, "tls.crt"), filepath.Join(ca.certDir, "tls.key"))
	if err != nil {
		b.Fatal(err)
	}
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	b.Cleanup(srv.Close)
	ref.url = srv.URL + "/mutate"
	return ref
}

// serve finds the request UID (the apiserver checks it) and answers with the fixed patch.
func (r *referenceWebhook) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	uid := ""
	if _, rest, ok := bytes.Cut(body, []byte(`"uid":"`)); ok {
		if end := bytes.IndexByte(rest, '"'); end >= 0 {
			uid = string(rest[:end])
		}
	}
	out, _ := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Response: &admissionv1.AdmissionResponse{UID: types.UID(uid), Allowed: true, Patch: r.patch, PatchType: ptrTo(admissionv1.PatchTypeJSONPatch)},
	})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

func ptrTo[T any](v T) *T { return &v }

// register installs the shipped Pod webhook configuration pointed at the reference server and
// waits until the apiserver calls it.
func (r *referenceWebhook) register(b testing.TB, suffix, ns string) registration {
	b.Helper()
	m, _ := shippedWebhooks(b)
	m.Name += suffix
	for i := range m.Webhooks {
		url := r.url
		m.Webhooks[i].ClientConfig.Service = nil
		m.Webhooks[i].ClientConfig.URL = &url
		m.Webhooks[i].ClientConfig.CABundle = r.ca
	}
	ctx := context.Background()
	if _, err := shared.Client().AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, m, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	reg := registration{mutating: m.Name}
	b.Cleanup(func() { unregister(b, reg) })
	j, err := shared.Client().BatchV1().Jobs(ns).Get(ctx, "bench", metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := shared.Client().CoreV1().Pods(ns).Create(ctx, jobPod(j, "reference-probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && p.Labels[v1alpha1.LabelProtected] == "true", nil
	})
	if err != nil {
		b.Fatalf("the apiserver does not call the reference webhook: %v", err)
	}
	return reg
}
