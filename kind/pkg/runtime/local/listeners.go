package local

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/gantry-dev/gantry/kind/pkg/cluster"
)

// tcpListen is the state of a listening socket in /proc/net/tcp{,6}.
const tcpListen = "0A"

// Listeners implements cluster.ListenerLister: the listening TCP sockets
// of every process whose pid the cluster recorded (kwokctl's components,
// Gantry's and Kueue's), read from /proc.
func (r *Runtime) Listeners() ([]cluster.Listener, error) {
	listening := map[string]string{} // socket inode → host:port
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		err = parseTCPTable(f, listening)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", table, err)
		}
	}
	pidFiles, err := filepath.Glob(filepath.Join(r.clusterDir(), "pids", "*.pid"))
	if err != nil {
		return nil, err
	}
	var out []cluster.Listener
	for _, pf := range pidFiles {
		component := strings.TrimSuffix(filepath.Base(pf), ".pid")
		data, err := os.ReadFile(pf)
		if err != nil {
			return nil, err
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("%s: no pid: %q", pf, data)
		}
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			return nil, fmt.Errorf("the sockets of %s (pid %d): %w", component, pid, err)
		}
		for _, fd := range fds {
			target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
			if err != nil {
				continue // closed meanwhile
			}
			inode, ok := strings.CutPrefix(target, "socket:[")
			if !ok {
				continue
			}
			if addr, ok := listening[strings.TrimSuffix(inode, "]")]; ok {
				out = append(out, cluster.Listener{Component: component, Address: addr})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Component != out[j].Component {
			return out[i].Component < out[j].Component
		}
		return out[i].Address < out[j].Address
	})
	return out, nil
}

// parseTCPTable adds the listening sockets of a /proc/net/tcp or tcp6
// table to listening, by inode.
func parseTCPTable(r io.Reader, listening map[string]string) error {
	s := bufio.NewScanner(r)
	s.Scan() // the header
	for s.Scan() {
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode ...
		f := strings.Fields(s.Text())
		if len(f) < 10 {
			return fmt.Errorf("short line %q", s.Text())
		}
		if f[3] != tcpListen {
			continue
		}
		addr, err := procAddress(f[1])
		if err != nil {
			return err
		}
		listening[f[9]] = addr
	}
	return s.Err()
}

// procAddress reads an address of /proc/net/tcp{,6}: the IP in hex, as
// 32-bit words in the host's (little-endian) order, then the port in hex.
func procAddress(s string) (string, error) {
	ipHex, portHex, ok := strings.Cut(s, ":")
	if !ok {
		return "", fmt.Errorf("address %q has no port", s)
	}
	raw, err := hex.DecodeString(ipHex)
	if err != nil || (len(raw) != net.IPv4len && len(raw) != net.IPv6len) {
		return "", fmt.Errorf("address %q: not an IP", s)
	}
	ip := make(net.IP, len(raw))
	for i := 0; i < len(raw); i += 4 {
		ip[i], ip[i+1], ip[i+2], ip[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	port, err := strconv.ParseUint(portHex, 16, 16)
	if err != nil {
		return "", fmt.Errorf("address %q: port: %w", s, err)
	}
	return net.JoinHostPort(ip.String(), strconv.FormatUint(port, 10)), nil
}
