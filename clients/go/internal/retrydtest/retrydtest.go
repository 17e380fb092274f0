// Package retrydtest starts the real retryd binary for the client's tests.
package retrydtest

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// Serve runs RETRYD_BIN (else this checkout's target/debug/retryd) on a
// free loopback port until the test ends and returns its address. Without
// a binary the test is skipped, unless RETRYD_CONFORMANCE_REQUIRED is set
// (run.sh and CI set it).
func Serve(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("RETRYD_BIN")
	if bin == "" {
		_, here, _, _ := runtime.Caller(0)
		bin = filepath.Join(filepath.Dir(here), "../../../../target/debug/retryd")
	}
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("RETRYD_CONFORMANCE_REQUIRED") != "" {
			t.Fatalf("no retryd at %s", bin)
		}
		t.Skipf("no retryd at %s; set RETRYD_BIN", bin)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "serve", "--listen", addr, "--metrics-listen", "off", "--log-level", "warn")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for i := 0; ; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
		if i > 200 {
			t.Fatalf("retryd did not listen on %s", addr)
		}
		time.Sleep(25 * time.Millisecond)
	}
}
