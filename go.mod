module github.com/leasehold/leasehold

go 1.26

require github.com/cespare/xxhash/v2 v2.3.0
