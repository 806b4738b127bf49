module keyhole/clients/go

go 1.19
