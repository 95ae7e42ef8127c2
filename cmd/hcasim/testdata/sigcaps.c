/* sigcaps: a libibverbs program (built against the installed headers, run
 * on hcasim's front end) that prints what mlx5dv_query_device reports as
 * the first device's signature capabilities, one "name value" line each
 * (decimal). cmd/hcasim's TestDevinfoAgreesWithFrontend compares them
 * with hcasim devinfo --json's sig_caps. */
#include <stdio.h>

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

int main(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1) {
		fprintf(stderr, "sigcaps: no device\n");
		return 1;
	}
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx) {
		perror("sigcaps: ibv_open_device");
		return 1;
	}
	struct mlx5dv_context a = {.comp_mask = MLX5DV_CONTEXT_MASK_SIGNATURE_OFFLOAD};
	int err = mlx5dv_query_device(ctx, &a);
	if (err) {
		fprintf(stderr, "sigcaps: mlx5dv_query_device: error %d\n", err);
		return 1;
	}
	if (!(a.comp_mask & MLX5DV_CONTEXT_MASK_SIGNATURE_OFFLOAD)) {
		fprintf(stderr, "sigcaps: no signature caps in the answer (comp_mask %#llx)\n",
			(unsigned long long)a.comp_mask);
		return 1;
	}
	printf("block_size %llu\n", (unsigned long long)a.sig_caps.block_size);
	printf("block_prot %u\n", a.sig_caps.block_prot);
	printf("t10dif_bg %u\n", a.sig_caps.t10dif_bg);
	printf("crc_type %u\n", a.sig_caps.crc_type);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
