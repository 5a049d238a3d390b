package localcluster

import (
	"context"
	"fmt"
	"os"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// RegisterLoopbackWebhooks creates the Mutating- and ValidatingWebhookConfigurations of a
// manifest file (e.g. manifests/webhook/webhooks.yaml) with every webhook pointed at a webhook
// process listening on 127.0.0.1:port (the manifest's Service path kept) and trusting ca.
func RegisterLoopbackWebhooks(ctx context.Context, kube kubernetes.Interface, manifest string, port int, ca []byte) error {
	b, err := os.ReadFile(manifest)
	if err != nil {
		return err
	}
	for _, doc := range strings.Split(string(b), "\n---") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil || meta.Kind == "" {
			continue
		}
		switch meta.Kind {
		case "MutatingWebhookConfiguration":
			m := &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := yaml.Unmarshal([]byte(doc), m); err != nil {
				return err
			}
			for i := range m.Webhooks {
				m.Webhooks[i].ClientConfig = loopbackClientConfig(m.Webhooks[i].ClientConfig, port, ca)
			}
			if _, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, m, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("register %s: %w", m.Name, err)
			}
		case "ValidatingWebhookConfiguration":
			v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := yaml.Unmarshal([]byte(doc), v); err != nil {
				return err
			}
			for i := range v.Webhooks {
				v.Webhooks[i].ClientConfig = loopbackClientConfig(v.Webhooks[i].ClientConfig, port, ca)
			}
			if _, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, v, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("register %s: %w", v.Name, err)
			}
		}
	}
	return nil
}

// loopbackClientConfig keeps the manifest's path but points at the local process.
func loopbackClientConfig(cc admissionregistrationv1.WebhookClientConfig, port int, ca []byte) admissionregistrationv1.WebhookClientConfig {
	path := ""
	if cc.Service != nil && cc.Service.Path != nil {
		path = *cc.Service.Path
	}
	url := fmt.Sprintf("https://127.0.0.1:%d%s", port, path)
	return admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca}
}
