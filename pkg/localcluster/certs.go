package localcluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki holds the files of the local control plane's certificates, all under one directory.
type pki struct {
	Dir            string
	CACert         string // CA certificate (PEM); signs the serving and client certificates
	CAKey          string
	ServingCert    string // kube-apiserver serving certificate for 127.0.0.1 / localhost
	ServingKey     string
	AdminCert      string // client certificate CN=lifeboat-admin, O=system:masters
	AdminKey       string
	ServiceAccount string // RSA private key signing service account tokens
	ServiceAccPub  string

	caPEM []byte
}

// newPKI writes a fresh CA, serving and admin certificates and service-account keys into dir.
func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &pki{
		Dir:            dir,
		CACert:         filepath.Join(dir, "ca.crt"),
		CAKey:          filepath.Join(dir, "ca.key"),
		ServingCert:    filepath.Join(dir, "apiserver.crt"),
		ServingKey:     filepath.Join(dir, "apiserver.key"),
		AdminCert:      filepath.Join(dir, "admin.crt"),
		AdminKey:       filepath.Join(dir, "admin.key"),
		ServiceAccount: filepath.Join(dir, "sa.key"),
		ServiceAccPub:  filepath.Join(dir, "sa.pub"),
	}
	ca, err := newAuthority("lifeboat-local-ca", 10*365*24*time.Hour, x509.KeyUsageKeyEncipherment)
	if err != nil {
		return nil, fmt.Errorf("create CA: %w", err)
	}
	p.caPEM = ca.pem()
	if err := writeCertKey(p.CACert, p.CAKey, ca.der, ca.key); err != nil {
		return nil, err
	}

	serving := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")},
	}
	if err := ca.issue(serving, p.ServingCert, p.ServingKey); err != nil {
		return nil, err
	}
	admin := &x509.Certificate{
		SerialNumber: big.NewInt(3),
		Subject:      pkix.Name{CommonName: "lifeboat-admin", Organization: []string{"system:masters"}},
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := ca.issue(admin, p.AdminCert, p.AdminKey); err != nil {
		return nil, err
	}

	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.ServiceAccount, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(saKey)}), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.ServiceAccPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPub}), 0o644); err != nil {
		return nil, err
	}
	return p, nil
}

// authority is a fresh self-signed CA; the certificates it issues share its validity.
type authority struct {
	cert                *x509.Certificate
	der                 []byte
	key                 *ecdsa.PrivateKey
	notBefore, notAfter time.Time
}

// newAuthority creates a CA named cn, valid from an hour ago for lifetime, that may sign
// certificates (and whatever extra allows).
func newAuthority(cn string, lifetime time.Duration, extra x509.KeyUsage) (*authority, error) {
	now := time.Now()
	ca := &authority{notBefore: now.Add(-time.Hour), notAfter: now.Add(lifetime)}
	var err error
	if ca.key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             ca.notBefore,
		NotAfter:              ca.notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | extra,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	if ca.der, err = x509.CreateCertificate(rand.Reader, tmpl, tmpl, &ca.key.PublicKey, ca.key); err != nil {
		return nil, err
	}
	ca.cert, _ = x509.ParseCertificate(ca.der)
	return ca, nil
}

// pem is the CA certificate in PEM, for a caBundle or a kubeconfig.
func (ca *authority) pem() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.der})
}

// issue signs tmpl (valid as long as the CA) for a fresh key and writes both.
func (ca *authority) issue(tmpl *x509.Certificate, certPath, keyPath string) error {
	tmpl.NotBefore, tmpl.NotAfter = ca.notBefore, ca.notAfter
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return fmt.Errorf("issue %s: %w", tmpl.Subject.CommonName, err)
	}
	return writeCertKey(certPath, keyPath, der, key)
}

func writeCertKey(certPath, keyPath string, der []byte, key *ecdsa.PrivateKey) error {
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
}

// WriteServingCert writes tls.crt and tls.key for hosts (IPs or DNS names) into dir, signed by
// a fresh CA, and returns the CA in PEM for a webhook configuration's caBundle.
func WriteServingCert(dir string, hosts ...string) (caPEM []byte, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := newAuthority("lifeboat-serving-ca", 365*24*time.Hour, 0)
	if err != nil {
		return nil, err
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: hosts[0]},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			leaf.IPAddresses = append(leaf.IPAddresses, ip)
		} else {
			leaf.DNSNames = append(leaf.DNSNames, h)
		}
	}
	if err := ca.issue(leaf, filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")); err != nil {
		return nil, err
	}
	return ca.pem(), nil
}
