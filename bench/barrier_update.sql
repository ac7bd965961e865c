UPDATE barrier_clock SET last_barrier = GREATEST(last_barrier+1, (extract(epoch from clock_timestamp())*1000000)::bigint) WHERE id=1 RETURNING last_barrier;
