module github.com/keyhouse/keyhouse/services/storefront

go 1.26.0

replace (
	github.com/keyhouse/keyhouse/pkg => ../../pkg
	github.com/keyhouse/keyhouse/proto/gen/go => ../../proto/gen/go
)
