// Package domainspec is what the API says of custom domains: the DNS
// records a customer creates. It holds no Raft command.
package domainspec

// RecordTypes is every DNS record type Records names.
var RecordTypes = []string{"CNAME", "A", "AAAA", "TXT"}

// Record is a DNS record the customer creates at their DNS provider.
type Record struct {
	Type  string `json:"type" enum:"@dnsRecordType"`
	Name  string `json:"name"`
	Value string `json:"value"`
}
