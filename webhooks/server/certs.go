package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// secretCerts serves the self-managed serving certificate straight from the Secret that
// cert-controller's rotator writes, and mirrors it into the cert directory (where the rotator
// checks for it). Reading the Secret through the API rather than a mounted volume means a new
// replica serves as soon as the certificate exists, not after the kubelet's volume sync (up to a
// minute), and a rotation is picked up within a poll period.
type secretCerts struct {
	reader client.Reader
	key    types.NamespacedName
	dir    string
	poll   time.Duration

	mu      sync.RWMutex
	cert    *tls.Certificate
	certPEM []byte
}

// GetCertificate is the tls.Config hook.
func (s *secretCerts) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.cert == nil {
		return nil, errors.New("the self-managed serving certificate is not ready yet")
	}
	return s.cert, nil
}

// Ready reports whether a certificate is loaded.
func (s *secretCerts) Ready() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cert != nil
}

// NeedLeaderElection: every replica serves, so every replica needs the certificate.
func (s *secretCerts) NeedLeaderElection() bool { return false }

// Start polls the Secret (from the informer cache: the poll costs no API call).
func (s *secretCerts) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("certs")
	t := time.NewTicker(s.poll)
	defer t.Stop()
	for {
		if err := s.sync(ctx); err != nil {
			logger.V(2).Info("Serving certificate not loaded yet", "secret", s.key, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (s *secretCerts) sync(ctx context.Context) error {
	var secret corev1.Secret
	if err := s.reader.Get(ctx, s.key, &secret); err != nil {
		return err
	}
	certPEM, keyPEM := secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey]
	if len(certPEM) == 0 || len(keyPEM) == 0 {
		return fmt.Errorf("secret %s has no %s/%s yet", s.key, corev1.TLSCertKey, corev1.TLSPrivateKeyKey)
	}
	s.mu.RLock()
	same := string(s.certPEM) == string(certPEM)
	s.mu.RUnlock()
	if same {
		return nil
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("secret %s holds an unusable key pair: %w", s.key, err)
	}
	if err := writeAtomic(filepath.Join(s.dir, corev1.TLSPrivateKeyKey), keyPEM); err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(s.dir, corev1.TLSCertKey), certPEM); err != nil {
		return err
	}
	s.mu.Lock()
	s.cert, s.certPEM = &pair, certPEM
	s.mu.Unlock()
	klog.FromContext(ctx).Info("Loaded serving certificate", "secret", s.key)
	return nil
}

func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	return nil
}
