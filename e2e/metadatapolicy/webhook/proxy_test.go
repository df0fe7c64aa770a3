package webhook

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// roundRobinProxy stands in for the webhook's Service: it forwards each TCP
// connection to the next backend in turn (TLS passes through), and counts
// connections per backend.
type roundRobinProxy struct {
	ln       net.Listener
	backends []string
	next     atomic.Uint64
	wg       sync.WaitGroup
}

func startProxy(backends ...string) (*roundRobinProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &roundRobinProxy{ln: ln, backends: backends}
	p.wg.Go(p.serve)
	return p, nil
}

// Addr is the proxy's host:port.
func (p *roundRobinProxy) Addr() string { return p.ln.Addr().String() }

// Close stops accepting; open connections end with their peers.
func (p *roundRobinProxy) Close() error {
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *roundRobinProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.forward(c, p.backends[(p.next.Add(1)-1)%uint64(len(p.backends))])
	}
}

func (p *roundRobinProxy) forward(client net.Conn, backend string) {
	defer client.Close()
	server, err := net.Dial("tcp", backend)
	if err != nil {
		return
	}
	defer server.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tcp, ok := dst.(*net.TCPConn); ok {
			_ = tcp.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(server, client)
	go pipe(client, server)
	<-done
	<-done
}
