package awsemu

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsclient"
)

// Server is an Emulator listening on a TCP address.
type Server struct {
	*Emulator
	// URL is the endpoint to give the SDK (--ec2-endpoint and --sqs-endpoint), e.g.
	// http://127.0.0.1:40123.
	URL string

	srv  *http.Server
	done chan error
}

// Start listens on addr ("127.0.0.1:0" picks a free port) and serves e until Close.
func Start(e *Emulator, addr string) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &Server{
		Emulator: e,
		URL:      "http://" + ln.Addr().String(),
		srv:      &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second},
		done:     make(chan error, 1),
	}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

// Close stops the emulator (waking long polls) and the HTTP server, and waits for it. It shuts
// down gracefully for up to 5 s, then closes the remaining connections: on a loaded machine a
// client may still be mid-request, and an emulator that is going away owes it nothing.
func (s *Server) Close() error {
	s.Emulator.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
	if serveErr := <-s.done; serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return nil
}

// Serve runs an emulator with opts on addr until ctx is done: the entry point of the emulator
// process (`lifeboat sim` and `lifeboat awsemu`). ready, if not nil, receives the server once it
// listens.
func Serve(ctx context.Context, addr string, opts Options, ready func(*Server)) error {
	s, err := Start(New(opts), addr)
	if err != nil {
		return err
	}
	if ready != nil {
		ready(s)
	}
	<-ctx.Done()
	return s.Close()
}

// ClientOptions point Lifeboat's AWS clients at the server: both endpoints, its region and
// static credentials (the emulator does not check signatures).
func (s *Server) ClientOptions() awsclient.Options {
	return awsclient.Options{
		Region:      s.opts.Region,
		EC2Endpoint: s.URL,
		SQSEndpoint: s.URL,
		Credentials: credentials.NewStaticCredentialsProvider("AKIDLIFEBOATEMU", "lifeboat-emulator-secret", ""),
	}
}
