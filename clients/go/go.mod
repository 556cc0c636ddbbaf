module github.com/keyhouse/keyhouse/clients/go

go 1.22
