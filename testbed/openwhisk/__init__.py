"""OpenWhisk's control logic, ported from apache/openwhisk: the controller's sharding balancer
(:mod:`testbed.openwhisk.balancer`) and each invoker's container pool
(:mod:`testbed.openwhisk.pool`), shared by the simulator; what the modelled deployment sets
(:mod:`testbed.openwhisk.config`)."""
