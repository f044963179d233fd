package testkit

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// FreeAddr returns a 127.0.0.1 address with a port that was free a moment ago
// and that no earlier call in this process returned, for a server a test
// starts later. The port lies below the kernel's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range, 32768 when it cannot be read): a
// port from that range (what listening on port 0 gives) can become the local
// end of any outgoing connection before the server listens, which then fails
// with "address already in use". It fails only when 200 random ports in
// [10000, start of the range) were all taken.
func FreeAddr() (string, error) {
	const lowest = 10000
	high := ephemeralLow()
	if high <= lowest {
		return "", fmt.Errorf("testkit: free address: the ephemeral range starts at %d, no port below it above %d", high, lowest)
	}
	for range 200 {
		port := lowest + rand.IntN(high-lowest)
		if _, taken := handedOut.LoadOrStore(port, true); taken {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		_ = ln.Close()
		return ln.Addr().String(), nil
	}
	return "", fmt.Errorf("testkit: free address: no free port in [%d, %d) after 200 tries", lowest, high)
}

// FreePort is the port of FreeAddr.
func FreePort() (int, error) {
	addr, err := FreeAddr()
	if err != nil {
		return 0, err
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(port)
}

// handedOut holds every port FreeAddr returned in this process.
var handedOut sync.Map

// ephemeralLow is the first port of the kernel's ephemeral range.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				return n
			}
		}
	}
	return 32768
}
