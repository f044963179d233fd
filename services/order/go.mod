module example.com/shop/services/order

go 1.26.0

require (
	github.com/looplab/fsm v1.0.3
	github.com/santhosh-tekuri/jsonschema/v5 v5.3.1 // indirect
)

require (
	example.com/shop/contracts v0.0.0
	github.com/google/uuid v1.6.0
)

replace (
	example.com/shop/contracts => ../../contracts
	example.com/shop/platform => ../../platform
)
