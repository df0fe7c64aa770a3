// Package faultproxy is a reverse proxy to kube-apiserver that fails or
// delays chosen requests and counts them: put between a component and
// kube-apiserver, it shows what the component does when its API calls fail
// or are slow. The proxy ends the client's TLS connection. By default it
// presents its own credentials (the target's rest.Config) to
// kube-apiserver, so it serves anyone who reaches it as that identity: it
// listens on the loopback only, for tests. With
// Options.ForwardCredentials it passes each client's own credentials on
// instead, and can stand on a cluster's paths (cmd/faultproxy, on a kind
// node), ruled from elsewhere through ControlHandler and Remote.
package faultproxy

import (
	"crypto/tls"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// Rule is a fault: requests it matches wait Delay, then fail with Status
// (0: go on to kube-apiserver). Empty fields match everything.
type Rule struct {
	// Method is the request's HTTP method.
	Method string `json:"method,omitempty"`
	// PathPart is a part of the request's path.
	PathPart string `json:"pathPart,omitempty"`
	// UserAgent is a prefix of the request's User-Agent: a component's
	// name, as client-go sends it ("kube-scheduler/v1.37.2 ...").
	UserAgent string `json:"userAgent,omitempty"`
	// Every, above 1, makes the rule take only every Every-th request it
	// matches.
	Every  int           `json:"every,omitempty"`
	Status int           `json:"status,omitempty"`
	Delay  time.Duration `json:"delay,omitempty"`

	seen int
}

// Options change where and how New serves; the zero value is a loopback
// port, httptest's certificate, and the target's credentials.
type Options struct {
	// Listener, when not nil, is where the proxy serves instead of a
	// loopback port.
	Listener net.Listener
	// Certificate, when not nil, is the proxy's serving certificate
	// (clients may then verify it) instead of httptest's.
	Certificate *tls.Certificate
	// ForwardCredentials passes each request on with its client's own
	// credentials (its Authorization header), and uses only the target's
	// CA, never its client certificate or token: the proxy then gives no
	// one more rights than they have.
	ForwardCredentials bool
}

// Proxy is a running fault proxy.
type Proxy struct {
	srv *httptest.Server

	mu       sync.Mutex
	rules    []*Rule
	counts   map[string]int
	first    map[string]time.Time // when a request of "method path" first arrived
	agents   map[string]int       // requests by the product of their User-Agent
	injected int
}

// New starts a proxy to the kube-apiserver of target, on a loopback port,
// serving TLS (HTTP/2, as kube-apiserver does) with a certificate of its
// own: clients skip verifying it. Close stops it.
func New(target *rest.Config) (*Proxy, error) { return NewWithOptions(target, Options{}) }

// NewWithOptions is New, serving as o says.
func NewWithOptions(target *rest.Config, o Options) (*Proxy, error) {
	u, err := url.Parse(target.Host)
	if err != nil {
		return nil, err
	}
	if o.ForwardCredentials {
		target = rest.AnonymousClientConfig(target)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	if proxy.Transport, err = rest.TransportFor(target); err != nil {
		return nil, err
	}
	// A client that goes away (a component stopping, its watches
	// cancelled) is no proxy error; the default handler would log each
	// one to stderr.
	proxy.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		if r.Context().Err() != nil {
			return
		}
		klog.Background().Error(err, "Proxying to kube-apiserver", "method", r.Method, "path", r.URL.Path)
		w.WriteHeader(http.StatusBadGateway)
	}
	p := &Proxy{counts: map[string]int{}, first: map[string]time.Time{}, agents: map[string]int{}}
	p.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rule := p.arrived(r)
		if rule.Delay > 0 {
			select {
			case <-time.After(rule.Delay):
			case <-r.Context().Done():
				return
			}
		}
		if rule.Status != 0 {
			http.Error(w, fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"injected fault","code":%d}`, rule.Status), rule.Status)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	// Over HTTP/1.1 a client keeps at most 25 idle connections: every
	// burst of more concurrent requests would open and close connections,
	// and their TLS handshakes would cost more than the work measured.
	p.srv.EnableHTTP2 = true
	if o.Listener != nil {
		_ = p.srv.Listener.Close()
		p.srv.Listener = o.Listener
	}
	if o.Certificate != nil {
		p.srv.TLS = &tls.Config{Certificates: []tls.Certificate{*o.Certificate}, MinVersion: tls.VersionTLS12}
	}
	p.srv.StartTLS()
	return p, nil
}

// arrived counts r and returns what the first rule that takes it says
// (the zero Rule: pass it on).
func (p *Proxy) arrived(r *http.Request) Rule {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	k := r.Method + " " + r.URL.Path
	if p.counts[k]++; p.counts[k] == 1 {
		p.first[k] = now
	}
	product, _, _ := strings.Cut(r.UserAgent(), "/")
	p.agents[product]++
	for _, rule := range p.rules {
		if !rule.matches(r) {
			continue
		}
		rule.seen++
		if rule.Every > 1 && rule.seen%rule.Every != 0 {
			continue
		}
		p.injected++
		return *rule
	}
	return Rule{}
}

func (rule *Rule) matches(r *http.Request) bool {
	return (rule.Method == "" || rule.Method == r.Method) &&
		strings.Contains(r.URL.Path, rule.PathPart) &&
		strings.HasPrefix(r.UserAgent(), rule.UserAgent)
}

// URL is the proxy's address.
func (p *Proxy) URL() string { return p.srv.URL }

// Close stops the proxy and cuts the connections through it.
func (p *Proxy) Close() {
	p.srv.CloseClientConnections()
	p.srv.Close()
}

// Add adds a rule, after those there are.
func (p *Proxy) Add(r Rule) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = append(p.rules, &r)
}

// Fail makes requests of method whose path contains part fail with status.
func (p *Proxy) Fail(method, part string, status int) {
	p.Add(Rule{Method: method, PathPart: part, Status: status})
}

// Delay makes requests of method whose path contains part wait d first.
func (p *Proxy) Delay(method, part string, d time.Duration) {
	p.Add(Rule{Method: method, PathPart: part, Delay: d})
}

// Clear removes every rule.
func (p *Proxy) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = nil
}

// Injected is how many requests a rule has failed or delayed so far.
func (p *Proxy) Injected() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.injected
}

// Count is how many requests of method to exactly path the proxy saw.
func (p *Proxy) Count(method, path string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[method+" "+path]
}

// First is when a request of method to exactly path first reached the
// proxy, if one did.
func (p *Proxy) First(method, path string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.first[method+" "+path]
	return t, ok
}

// Agents is how many requests the proxy has seen so far, by the product
// their User-Agent names (a component's name: "kube-scheduler").
func (p *Proxy) Agents() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.agents)
}

// Counts is how many requests the proxy has seen so far, by "method path".
func (p *Proxy) Counts() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.counts)
}
