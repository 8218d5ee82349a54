package hbaserpc

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/dcsync/dcsync"
)

// writableString encodes s as Hadoop's WritableUtils.writeString (a vint length of at
// most 127 here, then the bytes).
func writableString(s string) []byte {
	return append([]byte{byte(len(s))}, s...)
}

// TestReadSASLReply: the server's replies of the SASL exchange as HBase writes them:
// a token, a refusal with a Java exception, and the switch to simple authentication
// of a server without security; the last two are Unauthenticated naming the cause.
func TestReadSASLReply(t *testing.T) {
	var ok bytes.Buffer
	ok.Write(binary.BigEndian.AppendUint32(nil, saslStatusSuccess))
	ok.Write(binary.BigEndian.AppendUint32(nil, 3))
	ok.WriteString("tok")
	tok, err := readSASLReply(bufio.NewReader(&ok), "rs:1")
	if err != nil || string(tok) != "tok" {
		t.Fatalf("token reply = %q, %v", tok, err)
	}

	var refused bytes.Buffer
	refused.Write(binary.BigEndian.AppendUint32(nil, saslStatusError))
	refused.Write(writableString("javax.security.sasl.SaslException"))
	refused.Write(writableString("GSS initiate failed"))
	_, err = readSASLReply(bufio.NewReader(&refused), "rs:1")
	if dcsync.CodeOf(err) != dcsync.Unauthenticated || !strings.Contains(err.Error(), "GSS initiate failed") {
		t.Fatalf("refusal = %v; want Unauthenticated with the server's message", err)
	}

	var simple bytes.Buffer
	simple.Write(binary.BigEndian.AppendUint32(nil, saslStatusSuccess))
	simple.Write(binary.BigEndian.AppendUint32(nil, uint32(0xFFFFFFFF-87))) // -88
	_, err = readSASLReply(bufio.NewReader(&simple), "rs:1")
	if dcsync.CodeOf(err) != dcsync.Unauthenticated || !strings.Contains(err.Error(), "does not use Kerberos") {
		t.Fatalf("switch to simple = %v; want Unauthenticated saying the server has no Kerberos", err)
	}

	_, err = readSASLReply(bufio.NewReader(&bytes.Buffer{}), "rs:1")
	if dcsync.CodeOf(err) != dcsync.Unauthenticated || !strings.Contains(err.Error(), "closed the connection") {
		t.Fatalf("hang-up = %v; want Unauthenticated saying the server closed", err)
	}
}

// TestReadVInt checks the Hadoop vint decoding against values Java's
// WritableUtils.writeVInt encodes: one byte for -112..127, else a length byte and
// big-endian bytes (negative values stored as their complement).
func TestReadVInt(t *testing.T) {
	for _, c := range []struct {
		in   []byte
		want int64
	}{
		{[]byte{0x05}, 5},
		{[]byte{0x7f}, 127},
		{[]byte{0x90}, -112},
		{[]byte{0x8f, 0x80}, 128},       // -113: one byte follows
		{[]byte{0x8e, 0x01, 0x00}, 256}, // -114: two bytes follow
		{[]byte{0x87, 0x70}, -113},      // -121: negative, one byte: ^0x70 = -113
		{[]byte{0x8f, 0xff}, 255},
	} {
		got, err := readVInt(bufio.NewReader(bytes.NewReader(c.in)))
		if err != nil || got != c.want {
			t.Errorf("readVInt(% x) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
}
