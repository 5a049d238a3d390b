package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"

	"github.com/lifeboat-k8s/lifeboat/pkg/policy"
	"github.com/lifeboat-k8s/lifeboat/webhooks/internal/fixture"
	"github.com/lifeboat-k8s/lifeboat/webhooks/pod"
	"github.com/lifeboat-k8s/lifeboat/webhooks/workload"
)

var paths = []string{pod.Path, workload.Path}

func handlers() map[string]http.Handler {
	return Handlers(policy.DefaultConfig(), fixture.Cluster(), 2*time.Second)
}

func post(h http.Handler, body []byte) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// checkReview asserts the invariant of every answer: HTTP 200 with an AdmissionReview whose
// response carries the request's UID, or a clear 4xx for requests that could not be read; and
// never a recovered panic (500).
func checkReview(t *testing.T, path string, in []byte, w *httptest.ResponseRecorder) {
	t.Helper()
	if w.Code != http.StatusOK {
		t.Fatalf("%s: HTTP %d", path, w.Code)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
		t.Fatalf("%s: response is not an AdmissionReview: %v\n%s", path, err, w.Body.String())
	}
	resp := out.Response
	if resp == nil {
		t.Fatalf("%s: AdmissionReview without response: %s", path, w.Body.String())
	}
	if resp.Result != nil && resp.Result.Code >= 500 {
		t.Fatalf("%s: server error (a panic?) for input %q: %+v", path, truncate(in), resp.Result)
	}
	if resp.Result != nil && resp.Result.Code >= 400 && resp.Result.Code != http.StatusForbidden {
		if resp.Allowed || resp.Result.Message == "" {
			t.Fatalf("%s: error without a message or allowed: %+v", path, resp.Result)
		}
		return
	}
	// Decode as the webhook does (case-sensitive, like every Kubernetes decoder): "requEst" is
	// not a request.
	var in1 admissionv1.AdmissionReview
	if err := kjson.UnmarshalCaseSensitivePreserveInts(in, &in1); err == nil && in1.Request != nil && resp.UID != in1.Request.UID {
		t.Fatalf("%s: response UID %q, request UID %q", path, resp.UID, in1.Request.UID)
	}
}

func truncate(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}

// FuzzAdmissionReview sends arbitrary bytes to both webhooks as the apiserver would. The seed
// corpus is in testdata/fuzz/FuzzAdmissionReview (and runs with every go test); hack/fuzz.sh
// fuzzes for minutes.
func FuzzAdmissionReview(f *testing.F) {
	f.Add(fixture.Review(fixture.PodRequest(fixture.WebPod())))
	f.Add(fixture.Review(fixture.Request(admissionv1.Create, fixture.WebDeployment(), metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, "deployments")))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"version":"v1","kind":"Pod"},"operation":"CREATE","object":null}}`))
	hs := handlers()
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, p := range paths {
			checkReview(t, p, data, post(hs[p], data))
		}
	})
}

func TestOversizedRequest(t *testing.T) {
	hs := handlers()
	// 8 MiB of an otherwise valid review: over controller-runtime's 7 MiB limit.
	body := []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","object":{"metadata":{"annotations":{"a":"` +
		strings.Repeat("x", 8<<20) + `"}}}}}`)
	w := post(hs[pod.Path], body)
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || out.Response == nil || out.Response.Result.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("want a 413 AdmissionReview, got %s", truncate(w.Body.Bytes()))
	}
}

func TestHandlersEndToEnd(t *testing.T) {
	hs := handlers()
	w := post(hs[pod.Path], fixture.Review(fixture.PodRequest(fixture.WebPod())))
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if !out.Response.Allowed || out.Response.PatchType == nil || len(out.Response.Patch) == 0 || out.Response.UID != "req-1" {
		t.Fatalf("want a patch for req-1, got %+v", out.Response)
	}
}

// BenchmarkPodMutation is the Pod mutation path as the server runs it: decode the
// AdmissionReview, resolve the owner chain and policy from the (fake) cache, compute and encode
// the patch. The cache is controller-runtime's fake client, which deep-copies like the informer
// cache does.
func BenchmarkPodMutation(b *testing.B) {
	h := handlers()[pod.Path]
	body := fixture.Review(fixture.PodRequest(fixture.WebPod()))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatal(w.Code)
		}
	}
}

// BenchmarkPodMutationHandle is the decision and patch alone, without HTTP and JSON framing.
func BenchmarkPodMutationHandle(b *testing.B) {
	m := &pod.Mutator{Config: policy.DefaultConfig(), Cluster: fixture.Cluster()}
	req := fixture.PodRequest(fixture.WebPod())
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if resp := m.Handle(ctx, req); len(resp.Patches) == 0 {
			b.Fatal("no patch")
		}
	}
}
