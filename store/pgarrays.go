package store

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Array parameters without an allocation per element. pgx encodes a
// []string or []int64 parameter through its generic array codec, which
// hands each element over as an interface value: one allocation per
// string and per int64 that is not tiny. The message path binds its batch
// as arrays (ten per batch of events, sessionTx.go), so under load that
// was about 11 of the ~147 allocations per accepted message. textArray and
// int8Array are those parameters written straight into PostgreSQL's binary
// array format (array_send: dimensions, then each element's length and
// bytes) by codecs registered on every pooled connection; any other value
// of those array types goes to pgx's own codec as before. SQLite never
// sees them (its statements bind one placeholder per value).

// textArray is a text[] parameter.
type textArray []string

// int8Array is a bigint[] parameter.
type int8Array []int64

// registerArrayCodecs puts the codecs in front of pgx's own for text[] and
// bigint[] on one connection.
func registerArrayCodecs(c *pgx.Conn) {
	m := c.TypeMap()
	for _, a := range []struct {
		name         string
		oid, elemOID uint32
	}{
		{"_text", pgtype.TextArrayOID, pgtype.TextOID},
		{"_int8", pgtype.Int8ArrayOID, pgtype.Int8OID},
	} {
		elem, ok := m.TypeForOID(a.elemOID)
		if !ok {
			continue // pgx registers both; never happens
		}
		m.RegisterType(&pgtype.Type{Name: a.name, OID: a.oid, Codec: &flatArrayCodec{ArrayCodec: pgtype.ArrayCodec{ElementType: elem}}})
	}
}

// flatArrayCodec is pgx's ArrayCodec but for textArray and int8Array.
type flatArrayCodec struct{ pgtype.ArrayCodec }

func (c *flatArrayCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	switch value.(type) {
	case textArray, int8Array:
		if format == pgtype.BinaryFormatCode {
			return flatArrayPlan{}
		}
	}
	// Anything else, and the text format (arrays prefer binary): pgx's own
	// codec, or, for a textArray or int8Array, pgx's plan for the slice
	// under it.
	return c.ArrayCodec.PlanEncode(m, oid, format, value)
}

// flatArrayPlan writes a textArray or an int8Array in the binary format.
type flatArrayPlan struct{}

func (flatArrayPlan) Encode(value any, buf []byte) ([]byte, error) {
	switch v := value.(type) {
	case textArray:
		buf = arrayHeader(buf, pgtype.TextOID, len(v))
		for _, s := range v {
			if len(s) > math.MaxInt32 {
				return nil, fmt.Errorf("store: text array element of %d bytes", len(s))
			}
			buf = binary.BigEndian.AppendUint32(buf, uint32(len(s)))
			buf = append(buf, s...)
		}
		return buf, nil
	case int8Array:
		buf = arrayHeader(buf, pgtype.Int8OID, len(v))
		for _, n := range v {
			buf = binary.BigEndian.AppendUint32(buf, 8)
			buf = binary.BigEndian.AppendUint64(buf, uint64(n))
		}
		return buf, nil
	}
	return nil, fmt.Errorf("store: flatArrayPlan cannot encode %T", value)
}

// arrayHeader appends array_send's header of a one-dimensional array of n
// elements of type elemOID, none null (an empty array has no dimension).
func arrayHeader(buf []byte, elemOID uint32, n int) []byte {
	dims := uint32(1)
	if n == 0 {
		dims = 0
	}
	buf = binary.BigEndian.AppendUint32(buf, dims)
	buf = binary.BigEndian.AppendUint32(buf, 0) // no nulls
	buf = binary.BigEndian.AppendUint32(buf, elemOID)
	if n > 0 {
		buf = binary.BigEndian.AppendUint32(buf, uint32(n))
		buf = binary.BigEndian.AppendUint32(buf, 1) // lower bound
	}
	return buf
}
