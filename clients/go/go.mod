module github.com/retryd/retryd/clients/go

go 1.26.0

require (
	github.com/retryd/retryd/examples/go v0.0.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261110000943-09e21b237f2c
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)

// The generated stubs live in the repository's examples/go module (one
// generation, checked by scripts/polyglot-check.sh); this module uses them
// from the same checkout.
replace github.com/retryd/retryd/examples/go => ../../examples/go
