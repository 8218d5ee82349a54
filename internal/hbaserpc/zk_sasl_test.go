package hbaserpc

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
)

// TestZKSessionFraming: the SASL-mode ZooKeeper client's session, getData and
// closeSession against the fake ZooKeeper (the framing without Kerberos): a znode's
// bytes come back whole, a missing one is a retryable locate error.
func TestZKSessionFraming(t *testing.T) {
	z := newFakeZK(t, 0)
	z.setServer("/hbase/master", "127.0.0.1:16000", true)
	nc, err := net.Dial("tcp", z.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	s := &zkSession{nc: nc, r: bufio.NewReader(nc), addr: z.addr()}
	if err := s.connect(); err != nil {
		t.Fatalf("connect: %v", err)
	}
	data, err := s.getData("/hbase/master")
	if err != nil {
		t.Fatalf("getData: %v", err)
	}
	z.mu.Lock()
	want := string(z.nodes["/hbase/master"])
	z.mu.Unlock()
	if string(data) != want {
		t.Fatalf("getData = %q; want %q", data, want)
	}
	var le *locateError
	if _, err := s.getData("/hbase/none"); !errors.As(err, &le) || !le.retry {
		t.Fatalf("getData of a missing znode: %v; want a retryable locate error", err)
	}
	s.closeSession()
}

// TestZKRequiresSASL: a ZooKeeper that closes the session of a client that has not
// authenticated (code -124, SESSIONCLOSEDREQUIRESASLAUTH, as
// zookeeper.sessionRequireClientSASLAuth=true does) makes Dial fail Unauthenticated
// naming ZooKeeper and zk_sasl, before its deadline: no retry loop, no hang.
func TestZKRequiresSASL(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer nc.Close()
				r := bufio.NewReader(nc)
				if _, err := readFrame(r); err != nil {
					return
				}
				resp := binary.BigEndian.AppendUint32(nil, 0)
				resp = binary.BigEndian.AppendUint32(resp, 10000)
				resp = binary.BigEndian.AppendUint64(resp, 1)
				resp = appendJuteBuffer(resp, make([]byte, 16))
				if !writeZKFrame(nc, resp) {
					return
				}
				req, err := readFrame(r)
				if err != nil || len(req) < 8 {
					return
				}
				b := append([]byte{}, req[:4]...) // xid
				b = binary.BigEndian.AppendUint64(b, 0)
				b = binary.BigEndian.AppendUint32(b, uint32(0xffffffff-124+1)) // -124
				writeZKFrame(nc, b)
			}()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Dial(ctx, Config{ZKQuorum: ln.Addr().String(), Logger: testLogger(t)})
	if err == nil {
		c.Close()
		t.Fatal("Dial succeeded against a ZooKeeper that requires SASL")
	}
	if !errors.Is(err, dcsync.ErrUnauthenticated) || !strings.Contains(err.Error(), "ZooKeeper") || !strings.Contains(err.Error(), "zk_sasl") || ctx.Err() != nil {
		t.Fatalf("Dial: %v; want Unauthenticated naming ZooKeeper and zk_sasl, before the deadline", err)
	}
}
