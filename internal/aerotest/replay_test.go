package aerotest

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// transcriptLine is one line of testdata/transcript.jsonl, captured between
// the v8 Go client and a real Aerospike 8.1.2 server (see testdata/README.txt).
type transcriptLine struct {
	Seq    int       `json:"seq"`
	T      time.Time `json:"t"`
	Conn   int       `json:"conn"`
	Dir    string    `json:"dir"`
	Type   int       `json:"type"`
	Hex    string    `json:"hex"`
	Marker string    `json:"marker"`
}

type exchange struct {
	seq     int
	t       time.Time
	scen    string
	request []byte
	replies [][]byte // whole frames
}

// loadExchanges groups the captured frames of each connection into
// request/replies exchanges.
func loadExchanges(t *testing.T) map[int][]*exchange {
	t.Helper()
	f, err := os.Open("testdata/transcript.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[int][]*exchange{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<22)
	scen := ""
	for sc.Scan() {
		var l transcriptLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(l.Marker, "BEGIN scenario ") {
			scen = strings.SplitN(strings.TrimPrefix(l.Marker, "BEGIN scenario "), ":", 2)[0]
		}
		if l.Hex == "" {
			continue
		}
		b, err := hex.DecodeString(l.Hex)
		if err != nil {
			t.Fatal(err)
		}
		list := out[l.Conn]
		if l.Dir == "c2s" {
			out[l.Conn] = append(list, &exchange{seq: l.Seq, t: l.T, scen: scen, request: b})
			continue
		}
		if len(list) == 0 {
			t.Fatalf("reply #%d before any request", l.Seq)
		}
		last := list[len(list)-1]
		last.replies = append(last.replies, b)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func readRawFrame(r io.Reader) ([]byte, error) {
	var h [8]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := uint64(0)
	for _, c := range h[2:] {
		n = n<<8 | uint64(c)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, err
	}
	return append(h[:], body...), nil
}

// describeFrame renders an AS_MSG frame (possibly several messages) for diffs.
func describeFrame(b []byte) string {
	if len(b) < 8 || b[1] != protoTypeMsg {
		return fmt.Sprintf("%q", b)
	}
	body := b[8:]
	var sb strings.Builder
	for len(body) >= msgHeaderSize {
		m, err := parseMsgPrefix(body)
		if err != nil {
			return fmt.Sprintf("undecodable %x: %v", b, err)
		}
		fmt.Fprintf(&sb, "[rc=%d gen=%d void=%d idx=%d i3=%#x", m.msg.hdr.resultCode, m.msg.hdr.generation, m.msg.hdr.ttl, m.msg.hdr.txnTTL, m.msg.hdr.info3)
		for _, o := range m.msg.ops {
			v, _ := particleToValue(o.ptype, o.data)
			fmt.Fprintf(&sb, " op%d %s:%d=%v", o.op, o.name, o.ptype, v)
		}
		sb.WriteString("]")
		body = body[m.n:]
	}
	return sb.String()
}

type prefixMsg struct {
	msg *asMsg
	n   int
}

// parseMsgPrefix parses one AS_MSG at the start of b (batch replies hold several).
func parseMsgPrefix(b []byte) (prefixMsg, error) {
	m := &asMsg{}
	h := &m.hdr
	h.info3, h.resultCode = b[3], b[5]
	h.generation = uint32(b[6])<<24 | uint32(b[7])<<16 | uint32(b[8])<<8 | uint32(b[9])
	h.ttl = uint32(b[10])<<24 | uint32(b[11])<<16 | uint32(b[12])<<8 | uint32(b[13])
	h.txnTTL = uint32(b[14])<<24 | uint32(b[15])<<16 | uint32(b[16])<<8 | uint32(b[17])
	nf := int(b[18])<<8 | int(b[19])
	no := int(b[20])<<8 | int(b[21])
	p := b[msgHeaderSize:]
	var err error
	if _, p, err = parseFields(p, nf); err != nil {
		return prefixMsg{}, err
	}
	if m.ops, p, err = parseOps(p, no); err != nil {
		return prefixMsg{}, err
	}
	return prefixMsg{msg: m, n: len(b) - len(p)}, nil
}

// TestReplayCapture replays every request the real client sent (info and
// AS_MSG) to the fake server, with the server clock set to the capture
// time, and requires byte-identical replies (node name and service port
// substituted).
func TestReplayCapture(t *testing.T) {
	ex := loadExchanges(t)
	clock := &fakeClock{}
	srv := startServer(t, Options{Now: clock.Now, NodeName: "BB901000000FC02"})
	port := strconv.Itoa(srv.Port())
	compared := map[byte]int{}

	for _, conn := range []int{1, 2, 3} {
		c, err := net.Dial("tcp", srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		for _, e := range ex[conn] {
			clock.mu.Lock()
			clock.t = e.t
			clock.mu.Unlock()
			if _, err := c.Write(e.request); err != nil {
				t.Fatal(err)
			}
			for i, want := range e.replies {
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				got, err := readRawFrame(br)
				if err != nil {
					t.Fatalf("conn %d #%d (scenario %s): reading reply %d: %v", conn, e.seq, e.scen, i, err)
				}
				compared[want[1]]++
				if want[1] == protoTypeInfo {
					w := strings.ReplaceAll(string(want[8:]), "0,3000,[]", "0,"+port+",[]")
					if string(got[8:]) != w {
						t.Errorf("conn %d #%d info reply\n got %q\nwant %q", conn, e.seq, got[8:], w)
					}
					continue
				}
				if !bytes.Equal(got, want) {
					t.Errorf("conn %d #%d (scenario %s) reply %d differs\n got %s\nwant %s", conn, e.seq, e.scen, i, describeFrame(got), describeFrame(want))
				}
			}
		}
		c.Close()
	}
	// 20 info replies and 59 AS_MSG reply frames (batch replies end with a separate LAST frame).
	if compared[protoTypeInfo] != 20 || compared[protoTypeMsg] != 59 {
		t.Fatalf("compared %v replies; the transcript was not fully replayed", compared)
	}
}
