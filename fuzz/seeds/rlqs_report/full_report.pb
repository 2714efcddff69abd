
rlqs,


useralice

path/api€åšw )


name	catch-all€åšw ÿÿÿÿÿÿÿÿÿ