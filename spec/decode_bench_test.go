package spec_test

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/mesh-fleet/mesh/spec"
)

// declaration327JSON is a declaration of 27 directories and 300 files of
// 1 KiB, as a host receives it.
func declaration327JSON() []byte {
	var rs []string
	for i := range 27 {
		p := fmt.Sprintf("/srv/s%d/d%d", i/9, i%9)
		rs = append(rs, fmt.Sprintf(`{"name":"m:directory:%s","kind":"directory","module":"m","directory":{"path":%q,"mode":"0755"}}`, p, p))
	}
	content := strings.Repeat("line of a small config file\n", 37)[:1024]
	for i := range 300 {
		p := fmt.Sprintf("/srv/s%d/d%d/f%03d", i%3, i%9, i)
		b := []byte(content)
		rs = append(rs, fmt.Sprintf(`{"name":"m:file:%s","kind":"file","module":"m","file":{"path":%q,"mode":"0644","content":%q,"size":1024,"digest":%q}}`,
			p, p, base64.StdEncoding.EncodeToString(b), spec.ContentDigest(b)))
	}
	return []byte(`{"mesh":"m","node":"alpha","seq":1,"issued":"2024-05-01T10:00:00Z","expires":"2024-05-02T10:00:00Z","protocol":1,"resources":[` +
		strings.Join(rs, ",") + `],"roster":{}}`)
}

// BenchmarkDecodeDeclaration327: what a host spends decoding a delivery.
func BenchmarkDecodeDeclaration327(b *testing.B) {
	body := declaration327JSON()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		var d spec.Declaration
		if err := spec.Decode(body, &d); err != nil || len(d.Resources) != 327 {
			b.Fatalf("%d resources: %v", len(d.Resources), err)
		}
	}
}
