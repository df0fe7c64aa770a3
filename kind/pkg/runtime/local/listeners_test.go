package local

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseTCPTable(t *testing.T) {
	tcp := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:094B 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1001 1 0000000000000000 100 0 0 10 0
   1: 00000000:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1002 1 0000000000000000 100 0 0 10 0
   2: 0100007F:094B 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 1003 1 0000000000000000 20 4 30 10 -1
   3: 0B00000A:1A0A 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1004 1 0000000000000000 100 0 0 10 0
`
	tcp6 := `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:1A0B 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2001 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000000000000:1A0C 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2002 1 0000000000000000 100 0 0 10 0
   2: 0000000000000000FFFF00000100007F:1A0D 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2003 1 0000000000000000 100 0 0 10 0
`
	got := map[string]string{}
	for _, table := range []string{tcp, tcp6} {
		if err := parseTCPTable(strings.NewReader(table), got); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{
		"1001": "127.0.0.1:2379",
		"1002": "0.0.0.0:80",
		"1004": "10.0.0.11:6666",
		"2001": "[::1]:6667",
		"2002": "[::]:6668",
		"2003": "127.0.0.1:6669", // IPv4-mapped
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("listening sockets (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"header only\n   0: 0100007F 00000000:0000 0A 0 0 0 0 0 1 x", "h\n 0: 01:0050 00000000:0000 0A 0 0 0 0 0 1"} {
		if err := parseTCPTable(strings.NewReader(bad), map[string]string{}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
