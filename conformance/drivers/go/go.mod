module github.com/redis-lock/redis-lock/conformance/drivers/go

go 1.19

require (
	github.com/gomodule/redigo v1.8.3
	github.com/redis-lock/redis-lock/clients/go v0.0.0
)

require github.com/mna/redisc v1.1.7 // indirect

replace github.com/redis-lock/redis-lock/clients/go => ../../../clients/go
