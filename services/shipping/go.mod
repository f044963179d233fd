module example.com/shop/services/shipping

go 1.26

require (
	example.com/shop/contracts v0.0.0
	example.com/shop/platform v0.0.0
)

replace (
	example.com/shop/contracts => ../../contracts
	example.com/shop/platform => ../../platform
)
